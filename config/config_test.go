package config_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/policy"
)

// TestPoliciesValidate: the default policy and every example validate
// with no warnings.
func TestPoliciesValidate(t *testing.T) {
	files := []string{"default.yaml"}
	err := filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return err
	})
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse(f, data)
		if err != nil {
			t.Errorf("%s:\n%v", f, err)
			continue
		}
		for _, w := range p.Warnings() {
			t.Errorf("warning: %v", w)
		}
	}
}

// TestDefault: the embedded policy is default.yaml and sends each kind of
// descriptor the comment at its top lists to the intended rule.
func TestDefault(t *testing.T) {
	p, err := policy.Parse(config.DefaultName, config.Default)
	if err != nil {
		t.Fatal(err)
	}
	if p.RequestIDKey() != "request_id" {
		t.Errorf("request_id_key %q", p.RequestIDKey())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"path=/healthz"}, "health-checks"},
		{[]string{"remote_address=10.0.0.1"}, "per-client"},
		{[]string{"user_id=alice"}, "per-user"},
		{[]string{"remote_address=10.0.0.1", "path=/login?next=/"}, "login-per-client"},
		{[]string{"user_id=alice", "path=/api/search?q=x"}, "search-per-user"},
		{[]string{"user_id=alice", "path=/api/orders"}, "api-per-user"},
		{[]string{"path=/api/orders"}, "api-global"},
		{[]string{"path=/static/app.js"}, ""},
	} {
		entries, err := policy.ParseEntries(c.args)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if r := p.Match("edge", entries); r != nil {
			got = r.Name
		}
		if got != c.want {
			t.Errorf("%v: rule %q, want %q", c.args, got, c.want)
		}
	}
	if r := p.Rule("edge", "search-per-user"); r.Cost != 5 {
		t.Errorf("the cost example costs %d", r.Cost)
	}
	// While Redis fails, logins are refused and the rest is answered from
	// the local budget.
	for _, r := range p.Rules("edge") {
		want := policy.StoreErrorLocal
		if r.Name == "login-per-client" {
			want = policy.StoreErrorDeny
		}
		if r.HasBucket() && r.OnStoreError != want {
			t.Errorf("%s: on_store_error %v, want %v", r.Name, r.OnStoreError, want)
		}
	}
}
