package frontdoor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
)

// benchPolicy is the load benchmarks' policy, shared with test/load.
var benchPolicy = func() string {
	data, err := os.ReadFile("../../test/load/policy.yaml")
	if err != nil {
		panic(err)
	}
	return string(data)
}()

var benchUsers = func() []string {
	u := make([]string, 100_000)
	for i := range u {
		u[i] = "u" + strconv.Itoa(i)
	}
	return u
}()

// BenchmarkCheck is the ext_authz handler for one descriptor, without
// gRPC: attributes, descriptors, decision, headers, response.
func BenchmarkCheck(b *testing.B) {
	f := newFixture(b, benchPolicy)
	ea := f.doors.ExtAuthz()
	req := checkRequest("198.51.100.7", map[string]string{"x-user-id": ""}, "/api/items?page=2", nil)
	h := req.Attributes.Request.Http.Headers
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h["x-user-id"] = benchUsers[i%len(benchUsers)]
		i++
		if _, err := ea.Check(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForwardAuth is the /v1/check handler for one descriptor, without
// the HTTP server: the request as Traefik sends it.
func BenchmarkForwardAuth(b *testing.B) {
	f := newFixture(b, benchPolicy)
	h := f.doors.ForwardAuth()
	r := httptest.NewRequest("GET", "/v1/check", nil)
	r.RemoteAddr = "10.1.1.1:5000"
	for k, v := range map[string]string{"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Method": "GET", "X-Forwarded-Proto": "https",
		"X-Forwarded-Host": "app.example.com", "X-Forwarded-Uri": "/api/items?page=2"} {
		r.Header.Set(k, v)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Header.Set("X-User-Id", benchUsers[i%len(benchUsers)])
		i++
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.code != 200 {
			b.Fatal(w.code)
		}
	}
}

type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
