package main

import (
	"bytes"
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy/watch"
)

// runOut runs tokengate with args and returns its exit code and outputs.
func runOut(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelp: --help, -h and help list every command on stdout and exit 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runOut(args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "tokengate "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("%v does not list %s:\n%s", args, c.name, out)
			}
		}
	}
}

// TestCommandHelp: CMD --help, CMD -h and help CMD print that command's
// usage and flags on stdout and exit 0, doing nothing else (validate does
// not open a file named --help).
func TestCommandHelp(t *testing.T) {
	wantFlags := map[string][]string{
		"serve":   {"--policy", "--store", "--redis-addr", "--ready-requires-store", "TOKENGATE_"},
		"explain": {"--policy", "--domain", "--front-door", "--header", "examples:"},
	}
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			code, out, errOut := runOut(args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
				continue
			}
			if !strings.HasPrefix(out, "usage: tokengate "+c.name+" "+c.synopsis+"\n") {
				t.Errorf("%v: %q, want the usage of %s", args, out, c.name)
			}
			for _, w := range wantFlags[c.name] {
				if !strings.Contains(out, w) {
					t.Errorf("%v does not say %q:\n%s", args, w, out)
				}
			}
		}
	}
}

// TestCLIErrors: an unknown command, flag or help topic exits 1 and says
// what was wrong on stderr.
func TestCLIErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command \"frobnicate\"\n\n"},
		{[]string{"valdate", "x.yaml"}, `unknown command "valdate" (did you mean validate?)`},
		{[]string{"help", "frobnicate"}, `help: unknown command "frobnicate"`},
		{[]string{"help", "simulat"}, `help: unknown command "simulat" (did you mean simulate?)`},
		{[]string{"serve", "--no-such-flag"}, "serve: unknown flag: --no-such-flag (tokengate serve --help lists the flags)"},
		{[]string{"validate", "--strict", "x.yaml"}, "validate: unknown flag: --strict"},
		{[]string{"serve", "--polciy", "p.yaml"}, "serve: unknown flag: --polciy (did you mean --policy?)\n"},
		{[]string{"explain", "--domian", "edge"}, "explain: unknown flag: --domian (did you mean --domain?)\n"},
		{[]string{"serve", "-Q"}, "serve: unknown shorthand flag: 'Q' in -Q (tokengate serve --help lists the flags)"},
		{[]string{"validate"}, "usage: tokengate validate FILE"},
		{[]string{"version", "extra"}, "version takes no arguments"},
	} {
		code, _, errOut := runOut(tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestVersion: version and --version print the same line; a version set
// at build time wins over the build information.
func TestVersion(t *testing.T) {
	_, a, _ := runOut("version")
	_, b, _ := runOut("--version")
	if a != b || a != "tokengate "+versionString()+"\n" {
		t.Fatalf("version %q, --version %q", a, b)
	}
	defer func(v string) { version = v }(version)
	version = "v1.2.3"
	if code, out, _ := runOut("--version"); code != 0 || out != "tokengate v1.2.3\n" {
		t.Fatalf("with -X main.version=v1.2.3: exit %d, %q", code, out)
	}
}

// TestBuildVersion: the version from a synthetic build information, as
// go build and go install record it.
func TestBuildVersion(t *testing.T) {
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "-tags", Value: "vtprotobuf"}, {Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if at != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.time", Value: at})
		}
		return append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
	}
	for _, tc := range []struct {
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"v1.4.0", nil, "v1.4.0"}, // go install …@v1.4.0
		// go install ./cmd/tokengate in a clone: Go stamps a pseudo-version.
		{"v0.0.0-20261201103803-cad8da9abcde+dirty", vcs("cad8da9abcdef0123", "2026-12-01T10:38:03Z", "true"), "v0.0.0-20261201103803-cad8da9abcde+dirty"},
		// The VCS read but no version made of it (a module below the repository's root).
		{"(devel)", vcs("cad8da9abcdef0123456", "2026-12-01T10:38:03Z", "false"), "dev-20261201103803-cad8da9abcde"},
		{"(devel)", vcs("cad8da9abcdef0123456", "2026-12-01T11:38:03+01:00", "true"), "dev-20261201103803-cad8da9abcde-dirty"},
		{"(devel)", vcs("cad8da9abcdef0123456", "", "false"), "dev-cad8da9abcde"},
		{"(devel)", vcs("cad8da9", "not a time", "false"), "dev-cad8da9"},
		{"(devel)", nil, "dev"}, // -buildvcs=false, a git worktree, no .git
		{"", nil, "dev"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.main}, Settings: tc.settings}
		if got := buildVersion(bi); got != tc.want {
			t.Errorf("main %q, settings %v: %q, want %q", tc.main, tc.settings, got, tc.want)
		}
	}
}

// TestLogDurations: durations are logged as Go writes them, in JSON too.
func TestLogDurations(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		settings{LogLevel: "info", LogFormat: format}.logger(&b).Info("x", slog.Duration("drain", 10*time.Second),
			slog.Group("g", slog.Duration("timeout", 15*time.Millisecond)))
		for _, w := range map[string][]string{
			"json": {`"drain":"10s"`, `"g":{"timeout":"15ms"}`},
			"text": {`drain=10s`, `g.timeout=15ms`},
		}[format] {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: %q does not say %s", format, b.String(), w)
			}
		}
	}
}

// TestPolicySourceKey: the line that says a policy loaded names its source
// with one key, policy_source, for the built-in policy and for a file.
func TestPolicySourceKey(t *testing.T) {
	file := tgproc.PolicyFile(t, "domains: {}\n")
	for _, path := range []string{"", file} {
		tap := newLogTap()
		ctx, cancel := context.WithCancel(context.Background())
		_, err := loadPolicy(ctx, settings{Policy: path}, clock.NewMonotonic(), metrics.New(prometheus.NewRegistry()), slog.New(tap))
		if err != nil {
			t.Fatal(err)
		}
		loaded := tap.lines("policy loaded")
		cancel()
		want := path
		if path == "" {
			want = "builtin:default.yaml"
		}
		if len(loaded) != 1 || attr(loaded[0], watch.SourceKey).String() != want {
			t.Errorf("policy %q: %d lines, %s=%q", path, len(loaded), watch.SourceKey, attrOf(loaded, watch.SourceKey))
		}
	}
}

func attrOf(rs []slog.Record, key string) string {
	if len(rs) == 0 {
		return ""
	}
	return attr(rs[0], key).String()
}
