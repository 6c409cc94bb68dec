// Package blackbox tests the built tokengate binary from the outside: real
// processes on loopback ports, a real gRPC client, real files.
package blackbox

import (
	"os"
	"testing"

	"github.com/tokengate/tokengate/internal/tgproc"
)

// binary is the tokengate binary built once for the package, with -race.
var binary string

func TestMain(m *testing.M) { os.Exit(tgproc.Main(m, &binary, true)) }

func start(t *testing.T, flags ...string) *tgproc.Proc { return tgproc.Start(t, binary, flags...) }
