package frontdoor

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/policy"
)

// TestIngressExamples: each ingress example's policy validates without
// warnings, reads the headers that ingress writes, and trusts the one hop
// that is the ingress; each ingress configuration calls /v1/check.
func TestIngressExamples(t *testing.T) {
	for _, c := range []struct {
		dir, config, original string
	}{
		{"traefik", "middleware.yaml", "x-forwarded"},
		{"traefik", "dynamic.yaml", "x-forwarded"},
		{"caddy", "Caddyfile", "x-forwarded"},
		{"ingress-nginx", "ingress.yaml", "x-original"},
	} {
		dir := filepath.Join("..", "..", "examples", c.dir)
		data, err := os.ReadFile(filepath.Join(dir, "policy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse(c.dir+"/policy.yaml", data)
		if err != nil {
			t.Fatalf("%s:\n%v", c.dir, err)
		}
		for _, w := range p.Warnings() {
			t.Errorf("warning: %v", w)
		}
		fd := p.FrontDoor(spec.ForwardAuth)
		if fd == nil || fd.OriginalRequest.String() != c.original || fd.TrustedProxyHops != 1 || fd.Domain("edge") == nil {
			t.Errorf("%s: forward_auth %+v", c.dir, fd)
		}
		cfg, err := os.ReadFile(filepath.Join(dir, c.config))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cfg), "/v1/check") {
			t.Errorf("%s/%s does not call /v1/check", c.dir, c.config)
		}
		if strings.HasSuffix(c.config, ".yaml") {
			dec := yaml.NewDecoder(bytes.NewReader(cfg))
			for {
				var doc map[string]any
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("%s/%s: %v", c.dir, c.config, err)
				}
			}
		}
	}
}
