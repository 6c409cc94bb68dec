package server

// The side listeners and the compat contract's (envoyproxy/ratelimit's)
// HTTP endpoints (sidelisteners.go).

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

const compatHTTPPolicy = `domains:
  rl:
    - name: per-user
      match: [{key: user}]
      capacity: 2
      refill: 2/s
`

// The reference's HTTP endpoints: /healthcheck and /json on the HTTP
// address, /rlconfig on the debug address, the metrics alone on theirs.
func TestCompatHTTP(t *testing.T) {
	s := newStack(t, compatHTTPPolicy, nil)
	srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log,
		DebugAddr: "127.0.0.1:0", MetricsListener: &MetricsListener{Addr: "127.0.0.1:0", Path: "/stats/prom"}})
	do := func(method, addr, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	httpAddr := srv.HTTPAddr().String()
	if code, body := do("GET", httpAddr, "/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	const req = `{"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, body := do("POST", httpAddr, "/json", req)
		if code != want || !strings.Contains(body, `"overallCode"`) {
			t.Fatalf("/json #%d: %d %s", i, code, body)
		}
	}
	if code, body := do("POST", httpAddr, "/json", `{"domain": 7}`); code != 400 {
		t.Errorf("/json of a bad body: %d %s", code, body)
	}
	if code, body := do("POST", httpAddr, "/json", `{"domain": ""}`); code != 400 {
		t.Errorf("/json of an empty domain: %d %s", code, body)
	}
	code, body := do("GET", srv.SideAddr("debug").String(), "/rlconfig", "")
	if code != 200 || !strings.Contains(body, "rl.user: capacity=2 refill=2/s, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("/rlconfig: %d %q", code, body)
	}
	code, body = do("GET", srv.SideAddr("metrics").String(), "/stats/prom", "")
	if code != 200 || !strings.Contains(body, "tokengate_") {
		t.Errorf("metrics listener: %d %.200q", code, body)
	}
	if code, _ := do("GET", srv.SideAddr("metrics").String(), "/metrics", ""); code != 404 {
		t.Errorf("metrics listener at another path: %d", code)
	}
}
