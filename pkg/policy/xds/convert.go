package xds

// A RateLimitConfig is the reference's descriptor tree in proto form, one
// domain each; envoyproxy/ratelimit turns it into its YAML model and loads
// it as it loads a file. So do we: each resource is rendered as a
// reference-format file and compiled by pkg/policy with the files' reader,
// so that both sources validate and decide on one path, with the same
// messages (their lines count in the rendered file, which the NACK names
// by the resource).

import (
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/policy"
)

// The reference format's fields, in its YAML names and order.
type (
	refFile struct {
		Domain      string          `yaml:"domain"`
		Descriptors []refDescriptor `yaml:"descriptors,omitempty"`
	}
	refDescriptor struct {
		Key            string          `yaml:"key"`
		Value          string          `yaml:"value,omitempty"`
		RateLimit      *refLimit       `yaml:"rate_limit,omitempty"`
		Descriptors    []refDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
	}
	refLimit struct {
		Unit            string       `yaml:"unit,omitempty"`
		RequestsPerUnit uint32       `yaml:"requests_per_unit"`
		Unlimited       bool         `yaml:"unlimited,omitempty"`
		Name            string       `yaml:"name,omitempty"`
		Replaces        []refReplace `yaml:"replaces,omitempty"`
	}
	refReplace struct {
		Name string `yaml:"name"`
	}
)

// File renders one RateLimitConfig as a reference-format policy file named
// "xds:" and the resource's name.
func File(c *rlsconf.RateLimitConfig) (policy.File, error) {
	data, err := yaml.Marshal(refFile{Domain: c.GetDomain(), Descriptors: descriptors(c.GetDescriptors())})
	if err != nil {
		return policy.File{}, fmt.Errorf("RateLimitConfig %q: %w", c.GetName(), err)
	}
	return policy.File{Name: "xds:" + c.GetName(), Data: data}, nil
}

func descriptors(ds []*rlsconf.RateLimitDescriptor) []refDescriptor {
	var out []refDescriptor
	for _, d := range ds {
		out = append(out, refDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), RateLimit: limit(d.GetRateLimit()),
			Descriptors: descriptors(d.GetDescriptors()), ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
		})
	}
	return out
}

func limit(p *rlsconf.RateLimitPolicy) *refLimit {
	if p == nil {
		return nil
	}
	l := &refLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	// UNKNOWN is the proto's zero: no unit, as the reference reads it.
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		l.Unit = strings.ToLower(u.String())
	}
	for _, r := range p.GetReplaces() {
		l.Replaces = append(l.Replaces, refReplace{Name: r.GetName()})
	}
	return l
}

// noResources is the policy of a response with no resource: no domain,
// every request answered OK, as the reference answers with no config.
var noResources = policy.File{Name: "xds:(no resources)", Data: []byte("domains: {}\n")}
