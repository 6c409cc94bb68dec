package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.opts.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /debug/policy", s.debugPolicy)
	if s.opts.ForwardAuth != nil {
		mux.Handle("/v1/check", s.opts.ForwardAuth)
	}
	if s.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// policyView is /debug/policy: what is serving, rule by rule.
type policyView struct {
	File     string                `json:"file"`
	Revision int64                 `json:"revision"`
	SHA256   string                `json:"sha256"`
	Domains  map[string][]ruleView `json:"domains"`
	// FrontDoors is the policy's front_doors section (debug_frontdoor.go).
	FrontDoors map[string]frontDoorView `json:"front_doors,omitempty"`
}

type ruleView struct {
	Name         string   `json:"name"`
	Match        []string `json:"match"`
	Unlimited    bool     `json:"unlimited,omitempty"`
	Capacity     int64    `json:"capacity,omitempty"`
	Refill       string   `json:"refill,omitempty"`
	Cost         int64    `json:"cost,omitempty"`
	MaxCost      int64    `json:"max_cost,omitempty"`
	OnResize     string   `json:"on_resize,omitempty"`
	OnStoreError string   `json:"on_store_error,omitempty"`
	Shadow       bool     `json:"shadow,omitempty"`
	Version      string   `json:"version,omitempty"`
}

func (s *Server) debugPolicy(w http.ResponseWriter, _ *http.Request) {
	p := s.opts.Policy()
	v := policyView{File: p.Name(), Revision: p.Revision(), SHA256: p.SHA256(), Domains: map[string][]ruleView{}, FrontDoors: frontDoorsView(p)}
	for _, d := range p.Domains() {
		for _, r := range p.Rules(d) {
			rv := ruleView{Name: r.Name, Unlimited: r.Unlimited, Shadow: r.Shadow}
			for _, m := range r.Match {
				rv.Match = append(rv.Match, m.String())
			}
			if !r.Unlimited {
				rv.Capacity, rv.Refill = r.Version.Params.Capacity(), r.Version.Params.Rate().String()
				rv.Cost, rv.MaxCost = r.Cost, r.MaxCost
				rv.OnResize, rv.OnStoreError = r.OnResize.String(), r.OnStoreError.String()
				rv.Version = strconv.FormatUint(r.Version.ID, 10)
			}
			v.Domains[d] = append(v.Domains[d], rv)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
