package server

// The side listeners, beside the gRPC and HTTP addresses: the debug
// listener (Options.DebugAddr: /rlconfig, pprof) and the metrics listener
// (Options.MetricsListener), where the registry is served alone at a path
// of its own. With them, the HTTP endpoints of the compat contract
// (envoyproxy/ratelimit's), so that its probes, its clients and its
// operators' habits work against tokengate unchanged: /healthcheck and
// /json on the HTTP address, /rlconfig on the debug one.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tokengate/tokengate/pkg/policy"
)

// MetricsListener is a second listener that serves the metrics alone.
type MetricsListener struct {
	Addr string
	Path string // ["/metrics"]
}

// healthcheck is GET /healthcheck: 200 "OK" while tokengate answers, 500
// once it drains or, with ReadyRequiresStore, while the store fails.
func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() || s.notReadyNow() != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}

// jsonRateLimit is /json: a RateLimitRequest in protobuf's JSON mapping,
// decided by ShouldRateLimit, answered as JSON: 200, 429 when over the
// limit, 400 for a body that is not a request or one the service refuses.
func (s *Server) jsonRateLimit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.GRPCMaxRecvBytes)))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if len(body) > gateFrom {
		defer s.decodes.enter(len(body))()
	}
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.opts.RateLimit.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		http.Error(w, status.Convert(err).Message(), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// debugRoutes are the debug address's: /rlconfig and pprof.
func (s *Server) debugRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, DumpPolicy(s.opts.Policy()))
	})
	handlePprof(mux)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "/debug/pprof/: pprof\n/rlconfig: the policy serving, one line a rule\n")
	})
	return mux
}

// DumpPolicy writes p as the reference's /rlconfig does, one line a rule:
// DOMAIN.MATCH: unit=UNIT requests_per_unit=N, shadow_mode: B, quota_mode: B,
// with the bucket's capacity and refill for a rule written in tokengate's
// format. The not_limited stops that compiling a reference tree adds are
// left out.
func DumpPolicy(p *policy.Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s revision %d sha256 %s\n", p.Name(), p.Revision(), p.SHA256())
	for _, d := range p.Domains() {
		for _, r := range p.Rules(d) {
			if r.NotLimited {
				continue
			}
			match := make([]string, len(r.Match))
			for i, m := range r.Match {
				match[i] = m.String()
			}
			fmt.Fprintf(&b, "%s.%s: ", d, strings.Join(match, "."))
			switch {
			case r.Unlimited:
				b.WriteString("unlimited")
			case r.Limit.Given:
				fmt.Fprintf(&b, "unit=%s requests_per_unit=%d", strings.ToUpper(r.Limit.Unit.String()), r.Limit.RequestsPerUnit)
			case r.Deny:
				b.WriteString("capacity=0")
			case !r.Plain():
				for i := range r.Bands {
					if i > 0 {
						b.WriteString("; ")
					}
					b.WriteString(r.Bands[i].String())
				}
			default:
				fmt.Fprintf(&b, "capacity=%d refill=%s", r.Version.Params.Capacity(), r.Version.Params.Rate())
			}
			fmt.Fprintf(&b, ", shadow_mode: %t, quota_mode: %t\n", r.Shadow, r.Quota)
		}
	}
	return b.String()
}

// sideServer is one of the extra HTTP listeners (debug, metrics).
type sideServer struct {
	name string
	l    net.Listener
	srv  *http.Server
}

// listenSide adds a listener on addr serving h, within the HTTP limits.
func (s *Server) listenSide(name, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: %s listener: %w", name, err)
	}
	s.side = append(s.side, sideServer{name, l, s.newHTTP(h)})
	return nil
}

// listenSides opens the debug and metrics listeners that opts ask for.
func (s *Server) listenSides() error {
	if s.opts.DebugAddr != "" {
		if err := s.listenSide("debug", s.opts.DebugAddr, s.debugRoutes()); err != nil {
			return err
		}
	}
	if m := s.opts.MetricsListener; m != nil {
		path := m.Path
		if path == "" {
			path = "/metrics"
		}
		mux := http.NewServeMux()
		mux.Handle("GET "+path, promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
		if err := s.listenSide("metrics", m.Addr, mux); err != nil {
			return err
		}
	}
	return nil
}

// SideAddr is the address the side listener name ("debug", "metrics") is
// bound to, nil when there is none.
func (s *Server) SideAddr(name string) net.Addr {
	for _, sd := range s.side {
		if sd.name == name {
			return sd.l.Addr()
		}
	}
	return nil
}

func (s *Server) closeSides() {
	for _, sd := range s.side {
		sd.l.Close()
	}
}

func (s *Server) shutdownSides(ctx context.Context) error {
	var first error
	for _, sd := range s.side {
		if err := sd.srv.Shutdown(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
