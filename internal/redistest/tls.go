package redistest

import (
	"strconv"
	"testing"

	"github.com/tokengate/tokengate/internal/tlstest"
)

// TLSServer is a redis-server that also serves TLS, with a certificate for
// 127.0.0.1 signed by a CA of its own.
type TLSServer struct {
	*Server
	TLSPort int
	CAFile  string // PEM of the CA that signed the server's certificate
	// ClientCert and ClientKey are a client certificate the same CA
	// signed, for a server that asks for one (--tls-auth-clients yes).
	ClientCert, ClientKey string
}

// TLSAddr is the host:port of the TLS listener.
func (s *TLSServer) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.TLSPort) }

// StartTLS starts a redis-server with a TLS port beside its plain one (the
// plain one answers the readiness PING), with extra arguments; it is
// stopped when the test ends.
func StartTLS(t testing.TB, extra ...string) *TLSServer {
	t.Helper()
	ca := tlstest.NewCA(t, "redistest")
	dir := t.TempDir()
	pair, client := ca.Server(t, dir, "server"), ca.Client(t, dir, "client")
	s := &TLSServer{TLSPort: freePort(t, false), CAFile: ca.CAFile, ClientCert: client.CertFile, ClientKey: client.KeyFile}
	s.Server = Start(t, append([]string{"--tls-port", strconv.Itoa(s.TLSPort), "--tls-cert-file", pair.CertFile,
		"--tls-key-file", pair.KeyFile, "--tls-ca-cert-file", ca.CAFile, "--tls-auth-clients", "no"}, extra...)...)
	return s
}
