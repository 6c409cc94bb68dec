package server

import (
	"github.com/tokengate/tokengate/pkg/policy"
)

// frontDoorView is one front door of /debug/policy.
type frontDoorView struct {
	TrustedProxyHops int                         `json:"trusted_proxy_hops"`
	OriginalRequest  string                      `json:"original_request,omitempty"`
	DefaultDomain    string                      `json:"default_domain,omitempty"`
	NormalizePath    bool                        `json:"normalize_path"`
	Domains          map[string][]descriptorView `json:"domains"`
}

type descriptorView struct {
	Line       int      `json:"line"`
	Actions    []string `json:"actions"`
	HitsAddend string   `json:"hits_addend_header,omitempty"`
}

// frontDoorsView describes the policy's front doors; nil when it has none.
// An action reads as spec.Action.String writes it, e.g.
// "request_headers(x-user-id) -> user_id".
func frontDoorsView(p *policy.Policy) map[string]frontDoorView {
	fds := p.FrontDoors()
	if len(fds) == 0 {
		return nil
	}
	out := make(map[string]frontDoorView, len(fds))
	for _, fd := range fds {
		v := frontDoorView{TrustedProxyHops: fd.TrustedProxyHops, OriginalRequest: fd.OriginalRequest.String(),
			DefaultDomain: fd.DefaultDomain, NormalizePath: fd.NormalizePath, Domains: map[string][]descriptorView{}}
		for _, name := range fd.Domains() {
			for _, d := range fd.Domain(name).Descriptors {
				dv := descriptorView{Line: d.Line, HitsAddend: d.HitsAddendHeader}
				for _, a := range d.Actions {
					dv.Actions = append(dv.Actions, a.String())
				}
				v.Domains[name] = append(v.Domains[name], dv)
			}
		}
		out[fd.Name] = v
	}
	return out
}
