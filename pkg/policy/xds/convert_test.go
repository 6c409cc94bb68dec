package xds

import (
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/policy"
)

// A RateLimitConfig compiles to the policy of the reference file that
// says the same, field for field.
func TestFileIsTheReferenceFile(t *testing.T) {
	cfg := &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 10, Name: "per-user"},
			DetailedMetric: true,
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: "path", Value: "/api/*", ShadowMode: true,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 5,
					Replaces: []*rlsconf.RateLimitReplace{{Name: "per-user"}}},
			}}},
		{Key: "health", Value: "yes", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "blocked", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY}},
		{Key: "hourly", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1}},
	}}
	const ref = `domain: edge
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10, name: per-user}
    descriptors:
      - key: path
        value: /api/*
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: per-user}]}
  - key: health
    value: "yes"
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	f, err := File(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "xds:default/eg/http" {
		t.Errorf("name %q", f.Name)
	}
	native := func(files ...policy.File) string {
		t.Helper()
		p, err := policy.ParseFiles("set", files)
		if err != nil {
			t.Fatal(err)
		}
		y, err := p.NativeYAML()
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	got, want := native(f), native(policy.File{Name: "ref.yaml", Data: []byte(ref)})
	if got != want {
		t.Fatalf("from the proto:\n%s\nfrom the file:\n%s", got, want)
	}
}

// Two configs of one domain are refused, naming both.
func TestRepeatedDomain(t *testing.T) {
	var files []policy.File
	for _, name := range []string{"a", "b"} {
		f, err := File(&rlsconf.RateLimitConfig{Name: name, Domain: "edge"})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	_, err := policy.ParseFiles("set", files)
	if err == nil || !strings.Contains(err.Error(), "repeated domain: also in xds:a") {
		t.Fatalf("err %v", err)
	}
}

// TestFileBounds: a config nested deeper than a descriptor can be long,
// or one that would render past policy.MaxFileSize, is refused before it
// is rendered, in well under a second (the bound is 5 s, for loaded machines); one 32 levels deep renders.
func TestFileBounds(t *testing.T) {
	deep := func(levels int) *rlsconf.RateLimitConfig {
		var ds []*rlsconf.RateLimitDescriptor
		for i := levels - 1; i >= 0; i-- {
			ds = []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}, Descriptors: ds}}
		}
		return &rlsconf.RateLimitConfig{Name: "deep", Domain: "edge", Descriptors: ds}
	}
	wide := &rlsconf.RateLimitConfig{Name: "wide", Domain: "edge"}
	for range 300_000 {
		wide.Descriptors = append(wide.Descriptors, &rlsconf.RateLimitDescriptor{Key: "a-sixteen-byte-k"})
	}
	if _, err := File(deep(policy.MaxMatchEntries)); err != nil {
		t.Fatalf("a config %d levels deep: %v", policy.MaxMatchEntries, err)
	}
	for _, tc := range []struct {
		name string
		cfg  *rlsconf.RateLimitConfig
		says string
	}{
		{"33 levels", deep(policy.MaxMatchEntries + 1), `RateLimitConfig "deep": edge.k.k`},
		{"5,000 levels", deep(5000), "descriptors nested deeper than 32 levels"},
		{"past the file size", wide, "renders to more than 4194304 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begin := time.Now()
			_, err := File(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("File: %v, want it to say %q", err, tc.says)
			}
			if took := time.Since(begin); took > 5*time.Second {
				t.Fatalf("refused after %v", took)
			}
		})
	}
}
