package frontdoor

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
)

// FuzzForwardAuthQuery: whatever query string, path and headers a client
// sends to /v1/check (ingress-nginx and Traefik pass them on), the answer
// is 200, the deny status or 400, never a panic or a 5xx of the policy's
// making, and a bounded body.
func FuzzForwardAuthQuery(f *testing.F) {
	for _, seed := range []struct{ query, path, user string }{
		{"", "/api/a", "alice"},
		{"domain=edge", "/api/b?x=1", "bob"},
		{"domain=other", "/", ""},
		{"domain=%ff%fe&domain=edge", "//api/../a", "\xff"},
		{"domain=" + url.QueryEscape(string(make([]byte, 300))), "/a;b=c/%2e%2e", "x"},
		{"%zz", "", "carol"},
	} {
		f.Add(seed.query, seed.path, seed.user)
	}
	fx := newFixture(f, testPolicy)
	h := fx.doors.ForwardAuth()
	f.Fuzz(func(t *testing.T, query, path, user string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/check", nil)
		r.URL.RawQuery = query
		r.RemoteAddr = "192.0.2.7:40000"
		r.Header["X-Original"] = []string{path}
		r.Header["X-User"] = []string{user}
		r.Header["X-Forwarded-For"] = []string{"198.51.100.1, 203.0.113.9"}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest:
		default:
			t.Fatalf("query %q path %q user %q: status %d %q", query, path, user, w.Code, w.Body.String())
		}
		if n := w.Body.Len(); n > 4096+len(query)+len(path)+len(user) {
			t.Fatalf("a body of %d bytes", n)
		}
		if w.Code != http.StatusBadRequest {
			if _, err := strconv.Atoi(w.Header().Get("RateLimit-Remaining")); w.Header().Get("RateLimit-Remaining") != "" && err != nil {
				t.Fatalf("RateLimit-Remaining %q", w.Header().Get("RateLimit-Remaining"))
			}
		}
	})
}
