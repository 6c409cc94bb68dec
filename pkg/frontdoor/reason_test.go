package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store"
)

// failingStore fails every decision, like an unreachable Redis.
type failingStore struct{}

func (failingStore) Decide(context.Context, *store.Request, []store.Result) (store.Outcome, error) {
	return store.Outcome{}, errors.New("connection refused")
}

// TestReasonToldOnlyWhenAsked: why a request can never pass (the front
// door's own refusal of a cost header, the service's of an over-long
// value) and that the store failed reach the client, as a header or the
// problem's detail, only when the service tells clients why; ext_authz's
// dynamic metadata says why either way. The limit headers are the
// client's in both.
func TestReasonToldOnlyWhenAsked(t *testing.T) {
	for _, tell := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "ClientReasonHeader"}[tell], func(t *testing.T) {
			on := func(o *service.Options) { o.ClientReasonHeader = tell }
			f := newFixture(t, testPolicy, on)
			ea := f.doors.ExtAuthz()
			resp, err := ea.Check(context.Background(), checkRequest("10.0.0.1", map[string]string{"x-user": "a", "x-cost": "lots"}, "/api/x", nil))
			den := resp.GetDeniedResponse()
			if err != nil || den == nil {
				t.Fatalf("bad cost: %v %v", resp, err)
			}
			const bad = `cost header x-cost: "lots" is not a whole number`
			if r := resp.DynamicMetadata.GetFields()[service.MetaReason].GetStringValue(); r != bad {
				t.Fatalf("bad cost: metadata reason %q, want %q", r, bad)
			}
			wantTold(t, "ext_authz bad cost", tell, headerOf(den.Headers, "x-tokengate-reason"), den.Body, bad)

			r := httptest.NewRequest("GET", ForwardAuthPath, nil)
			r.RemoteAddr = "10.1.1.1:5000"
			r.Header.Set("X-Forwarded-For", "1.2.3.4")
			r.Header.Set("X-Original-URL", "https://api.example.com/api/a")
			r.Header.Set("X-User", strings.Repeat("u", service.MaxValueBytes+1))
			w := httptest.NewRecorder()
			f.doors.ForwardAuth().ServeHTTP(w, r)
			const long = `descriptor value of 4097 bytes for key "user_id" (at most 4096)`
			if w.Code != 429 || w.Header().Get("RateLimit-Policy") == "" {
				t.Fatalf("over-long value: %d %v, want 429 with the limit headers", w.Code, w.Header())
			}
			wantTold(t, "forward-auth over-long value", tell, w.Header().Get("X-Tokengate-Reason"), w.Body.String(), long)

			g := newFixture(t, testPolicy, on, func(o *service.Options) { o.Store = failingStore{} })
			resp, err = g.doors.ExtAuthz().Check(context.Background(), checkRequest("10.0.0.2", nil, "/", nil))
			if err != nil || resp.GetDeniedResponse() == nil || !resp.DynamicMetadata.GetFields()[service.MetaDegraded].GetBoolValue() {
				t.Fatalf("store failing: %v %v, want denied, degraded in the metadata", resp, err)
			}
			if got, want := headerOf(resp.GetDeniedResponse().Headers, "x-tokengate-degraded"), map[bool]string{true: "store-error"}[tell]; got != want {
				t.Fatalf("store failing: x-tokengate-degraded %q, want %q", got, want)
			}
		})
	}
}

// wantTold checks a denial's reason header and problem detail: why, when
// told, else neither.
func wantTold(t *testing.T, what string, tell bool, header, body, why string) {
	t.Helper()
	var p struct{ Detail *string }
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%s: body %q: %v", what, body, err)
	}
	want := ""
	if tell {
		want = why
	}
	if detail := p.Detail; header != want || (detail == nil) == tell || detail != nil && *detail != why {
		t.Fatalf("%s: header %q, body %s; want header %q, detail only when told", what, header, body, want)
	}
}
