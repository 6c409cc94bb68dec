package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
)

// storeErrorFiles are a native file whose rule "unnamed" names no
// on_store_error and whose rule "denies" names deny, and a reference file
// (domain ref), which names none.
var storeErrorFiles = []policy.File{
	{Name: "native.yaml", Data: []byte("domains:\n  edge:\n" +
		"    - {name: unnamed, match: [{key: user_id}], capacity: 5, refill: 1/s}\n" +
		"    - {name: denies, match: [{key: path}], capacity: 5, refill: 1/s, on_store_error: deny}\n")},
	{Name: "ref.yaml", Data: []byte("domain: ref\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: second, requests_per_unit: 5}\n")},
}

// TestOnStoreErrorSetting: --on-store-error, TOKENGATE_ON_STORE_ERROR and
// the settings file's on-store-error set what the rules that name none
// answer, in both formats, local when none is given, also when invoked as
// ratelimit; a rule that names one keeps it; a bad mode stops the start.
func TestOnStoreErrorSetting(t *testing.T) {
	file := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(file, []byte("on-store-error: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want policy.StoreErrorMode
	}{
		{"default", nil, "", policy.StoreErrorLocal},
		{"flag", []string{"--on-store-error", "allow"}, "", policy.StoreErrorAllow},
		{"variable", nil, "deny", policy.StoreErrorDeny},
		{"flag over variable", []string{"--on-store-error", "local"}, "deny", policy.StoreErrorLocal},
		{"settings file", []string{"--config", file}, "", policy.StoreErrorDeny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("TOKENGATE_ON_STORE_ERROR", tc.env)
			}
			s, err := loadSettings(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			wantModes(t, s, tc.want)
		})
	}
	t.Run("ratelimit", func(t *testing.T) {
		s, _, err := compatSettings([]string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379"})
		if err != nil {
			t.Fatal(err)
		}
		wantModes(t, s, policy.StoreErrorLocal)
	})
	for _, bad := range [][]string{{"--on-store-error", "fail-open"}, {"--on-store-error", ""}} {
		if _, err := loadSettings(bad); err == nil || !strings.Contains(err.Error(), `--on-store-error "`+bad[1]+`": want deny, allow or local`) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// wantModes fails unless the policies serve compiles under s answer want
// for the rules of storeErrorFiles that name no on_store_error, and deny
// for the one that names it.
func wantModes(t *testing.T, s settings, want policy.StoreErrorMode) {
	t.Helper()
	p, err := newCompiler(s, nil).CompileFiles("dir", storeErrorFiles, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*policy.Rule{p.Rule("edge", "unnamed"), p.Rule("ref", "user_id")} {
		if r.OnStoreError != want {
			t.Errorf("%s/%s: on_store_error %v, want %v", r.Domain, r.Name, r.OnStoreError, want)
		}
	}
	if r := p.Rule("edge", "denies"); r.OnStoreError != policy.StoreErrorDeny {
		t.Errorf("edge/denies: on_store_error %v, want deny", r.OnStoreError)
	}
}

// TestImportOnStoreError: import writes every rule's on_store_error, local
// unless --on-store-error says otherwise, and lists what the rules answer
// while Redis fails among the differences from the reference.
func TestImportOnStoreError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "local"},
		{[]string{"--on-store-error", "deny"}, "deny"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append(append([]string{"import"}, tc.args...), refExample), &stdout, &stderr); code != 0 {
			t.Fatalf("import %v: exit %d: %s", tc.args, code, stderr.String())
		}
		p, err := policy.Parse("native.yaml", stdout.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		limited := 0
		for _, r := range p.Rules("rl") {
			if r.HasBucket() {
				limited++
			}
		}
		if n := strings.Count(stdout.String(), "on_store_error: "+tc.want+"\n"); limited == 0 || n != limited || strings.Count(stdout.String(), "on_store_error:") != n {
			t.Errorf("import %v: on_store_error: %s on %d rules of %d limited:\n%s", tc.args, tc.want, n, limited, stdout.String())
		}
		if want := "the rule's on_store_error answers, marked degraded (written on every rule: " + tc.want + " on "; !strings.Contains(stderr.String(), want) {
			t.Errorf("import %v: the report lacks %q:\n%s", tc.args, want, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import", "--on-store-error", "open", refExample}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `--on-store-error "open": want deny, allow or local`) {
		t.Errorf("import --on-store-error open: exit %d, %q", code, stderr.String())
	}
}

// TestServeLoadsWithOnStoreError: the policies serve loads (the built-in
// one, a --policy file, a --candidate-policy file) are compiled with
// --on-store-error.
func TestServeLoadsWithOnStoreError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, storeErrorFiles[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name, domain, rule string
		args               []string
	}{
		{"built-in", "edge", "per-client", nil},
		{"--policy", "edge", "unnamed", []string{"--policy", file}},
	} {
		s, err := loadSettings(append([]string{"--on-store-error", "allow"}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		src, err := loadPolicy(ctx, s, clock.NewMonotonic(), metrics.New(prometheus.NewRegistry()), log)
		if err != nil {
			t.Fatal(err)
		}
		if got := src.current().Rule(tc.domain, tc.rule).OnStoreError; got != policy.StoreErrorAllow {
			t.Errorf("%s: %s/%s: on_store_error %v, want allow", tc.name, tc.domain, tc.rule, got)
		}
	}
	s, err := loadSettings([]string{"--on-store-error", "allow", "--candidate-policy", file})
	if err != nil {
		t.Fatal(err)
	}
	cand, err := loadCandidate(ctx, s, clock.NewMonotonic(), prometheus.NewRegistry(), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := cand.file.Current().Rule("edge", "unnamed").OnStoreError; got != policy.StoreErrorAllow {
		t.Errorf("candidate: edge/unnamed: on_store_error %v, want allow", got)
	}
}
