package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of HTTPLimits.
const (
	DefaultHTTPReadHeaderTimeout = 5 * time.Second
	DefaultHTTPReadTimeout       = 10 * time.Second
	// DefaultHTTPWriteTimeout bounds every response; /debug/pprof/profile
	// and /trace extend their own deadline by the time they record.
	DefaultHTTPWriteTimeout = 30 * time.Second
	DefaultHTTPIdleTimeout  = time.Minute
	// DefaultHTTPMaxHeaderBytes is above Envoy's own limit on request
	// headers (60 KiB), which forward-auth requests pass through.
	DefaultHTTPMaxHeaderBytes = 64 << 10
)

// HTTPLimits bound how long and how much one HTTP connection may hold of
// the HTTP listener (metrics, health, debug and forward-auth alike). A zero
// field takes its default.
type HTTPLimits struct {
	// ReadHeaderTimeout is the longest a client may take to send a
	// request's headers, however it trickles them.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is the longest a client may take to send a whole
	// request, its body included.
	ReadTimeout time.Duration
	// WriteTimeout is the longest a response may take, from the end of its
	// request's headers.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request before the server closes it.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block; a larger one is
	// answered 431. (net/http allows 4 KiB more.)
	MaxHeaderBytes int
}

func (l HTTPLimits) orDefaults() HTTPLimits {
	or := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	or(&l.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	or(&l.ReadTimeout, DefaultHTTPReadTimeout)
	or(&l.WriteTimeout, DefaultHTTPWriteTimeout)
	or(&l.IdleTimeout, DefaultHTTPIdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultHTTPMaxHeaderBytes
	}
	return l
}

// newHTTP builds an HTTP server of h within opts.HTTP's limits.
func (s *Server) newHTTP(h http.Handler) *http.Server {
	l := s.opts.HTTP.orDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /healthcheck", s.healthcheck)
	mux.HandleFunc("/json", s.jsonRateLimit)
	mux.HandleFunc("GET /debug/policy", s.debugPolicy)
	if s.opts.RateLimitQuotaView != nil {
		mux.Handle("GET /debug/rlqs", s.opts.RateLimitQuotaView)
	}
	if s.opts.Candidate != nil {
		mux.Handle("GET /debug/candidate", s.opts.Candidate)
	}
	if fa := s.opts.ForwardAuth; fa != nil {
		if s.opts.Propagator != nil {
			fa = s.extractTraceHTTP(fa)
		}
		mux.Handle("/v1/check", fa)
	}
	if s.opts.Pprof {
		handlePprof(mux)
	}
	return mux
}

// handlePprof serves net/http/pprof under /debug/pprof/ on mux.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
	NotLimited   bool     `json:"not_limited,omitempty"`
	Deny         bool     `json:"deny,omitempty"` // capacity 0
	Capacity     int64    `json:"capacity,omitempty"`
	Refill       string   `json:"refill,omitempty"`
	Limits       []string `json:"limits,omitempty"` // a rule of several limits, or a calendar budget: each
	Cost         int64    `json:"cost,omitempty"`
	MaxCost      int64    `json:"max_cost,omitempty"`
	Charge       string   `json:"charge,omitempty"`   // a post-paid rule's: after_response
	MaxDebt      *int64   `json:"max_debt,omitempty"` // a post-paid rule's
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
			rv := ruleView{Name: r.Name, Unlimited: r.Unlimited, NotLimited: r.NotLimited, Deny: r.Deny, Shadow: r.Shadow}
			for _, m := range r.Match {
				rv.Match = append(rv.Match, m.String())
			}
			if r.HasBucket() {
				if r.Plain() {
					rv.Capacity, rv.Refill = r.Version.Params.Capacity(), r.Version.Params.Rate().String()
				} else {
					for i := range r.Bands {
						rv.Limits = append(rv.Limits, r.Bands[i].String())
					}
				}
				rv.Cost, rv.MaxCost = r.Cost, r.MaxCost
				if r.PostPaid() {
					debt := r.Version.Params.MaxDebt()
					rv.Charge, rv.MaxDebt = r.Charge.String(), &debt
				}
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
