package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/spf13/pflag"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3". When it
// is not, the version comes from the build information (buildVersion).
var version = ""

// printVersion is `tokengate version` (and `tokengate --version`).
func printVersion(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("version", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("version takes no arguments")
	}
	_, err := fmt.Fprintln(stdout, "tokengate", versionString())
	return err
}

// versionString is the version set at build time, else the build
// information's.
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return buildVersion(bi)
}

// buildVersion is the module version `go install …@v1.2.3` records (or the
// pseudo-version go build stamps from the VCS), else "dev-", the commit's
// time and revision as a pseudo-version writes them (and "-dirty" for
// uncommitted changes), else "dev": the build recorded no VCS information
// (-buildvcs=false, a git worktree, a tree without .git).
func buildVersion(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				at = t.UTC().Format("20060102150405") + "-"
			}
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + at + rev[:min(len(rev), 12)] + dirty
}
