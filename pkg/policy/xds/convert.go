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
// "xds:" and the resource's name. A config deeper than a descriptor can be
// long, or whose file would pass policy.MaxFileSize, is refused before it
// is rendered: YAML indents each level, so a small deep config renders to
// a file of its depth squared (115 KB to 810 MB), and every replica gets
// the same config.
func File(c *rlsconf.RateLimitConfig) (policy.File, error) {
	if size, err := rendered(c.GetDescriptors(), 1, c.GetDomain()); err != nil {
		return policy.File{}, fmt.Errorf("RateLimitConfig %q: %w", c.GetName(), err)
	} else if size > policy.MaxFileSize {
		return policy.File{}, fmt.Errorf("RateLimitConfig %q: renders to more than %d bytes, the most a policy file may be", c.GetName(), policy.MaxFileSize)
	}
	data, err := yaml.Marshal(refFile{Domain: c.GetDomain(), Descriptors: descriptors(c.GetDescriptors())})
	if err != nil {
		return policy.File{}, fmt.Errorf("RateLimitConfig %q: %w", c.GetName(), err)
	}
	return policy.File{Name: "xds:" + c.GetName(), Data: data}, nil
}

// rendered is at most the size of descriptors ds at depth (1 at the top)
// once rendered, each a line "key: ..." indented two spaces a level. Past
// policy.MaxMatchEntries levels it fails, naming the keys from the top
// (path is the domain, for the message).
func rendered(ds []*rlsconf.RateLimitDescriptor, depth int, path string) (int, error) {
	if len(ds) > 0 && depth > policy.MaxMatchEntries {
		return 0, fmt.Errorf("%s: descriptors nested deeper than %d levels: a descriptor has at most %d entries, so nothing below can match", path, policy.MaxMatchEntries, policy.MaxMatchEntries)
	}
	size := 0
	for _, d := range ds {
		below := ""
		if len(d.GetDescriptors()) > 0 {
			below = path + "." + d.GetKey() // only where there is a level below to name
		}
		n, err := rendered(d.GetDescriptors(), depth+1, below)
		if err != nil {
			return 0, err
		}
		size += n + len(d.GetKey()) + len(d.GetValue()) + 2*depth
		if size > policy.MaxFileSize {
			break
		}
	}
	return size, nil
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
