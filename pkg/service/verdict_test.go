package service

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestVerdicts: each descriptor's verdict says what became of it, and the
// response's status is that verdict, field by field.
func TestVerdicts(t *testing.T) {
	f := newFixture(t, nil)
	for range 5 {
		f.call(t, 0, descr("user_id", "ida"), descr("remote_address", "10.1.1.1"))
	}
	huge := descr("user_id", "ida", "path", "/upload/x")
	huge.HitsAddend = wrapperspb.UInt64(11)
	ds := []*ratelimitv3.RateLimitDescriptor{
		descr("request_id", "r-1"), descr("nobody", "x"), descr("path", "/healthz"),
		descr("user_id", "ida"), descr("remote_address", "10.1.1.1"), descr("tenant", "t"),
	}
	d, err := f.svc.Decide(context.Background(), "edge", ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		rule   string
		result Result
		code   string
		cost   int64
	}{
		{"", ResultRequestID, "OK", 0},
		{"", ResultNoRule, "OK", 0},
		{"health", ResultOK, "OK", 0},
		{"per-user", ResultOverLimit, "OVER_LIMIT", 1},
		{"shadow-ip", ResultShadowOverLimit, "OK", 1},
		{"fail-open", ResultOK, "OK", 1},
	}
	for i, w := range want {
		v := d.Verdicts[i]
		name := ""
		if v.Rule != nil {
			name = v.Rule.Name
		}
		if name != w.rule || v.Result != w.result || v.Code.String() != w.code || v.Cost != w.cost || d.Rules[i] != v.Rule {
			t.Errorf("descriptor %d: %s %v %v cost %d, want %+v", i, name, v.Result, v.Code, v.Cost, w)
		}
		st := d.Response.Statuses[i]
		if st.Code != v.Code || st.LimitRemaining != v.LimitRemaining() || st.CurrentLimit != v.Limit() ||
			(st.DurationUntilReset != nil) != v.HasReset || st.DurationUntilReset.AsDuration() != v.Reset {
			t.Errorf("descriptor %d: status %v, verdict %+v", i, st, v)
		}
	}
	if v := d.Verdicts[3]; v.Retry <= 0 || v.Retry > time.Second || v.Reset != time.Second || v.Degraded() {
		t.Errorf("over limit: retry %v reset %v", v.Retry, v.Reset)
	}
	if v := d.Verdicts[4]; v.Retry != 0 {
		t.Errorf("a shadow rule's wait is not the client's: retry %v", v.Retry)
	}
	// A refusal makes the request check only: nothing is charged.
	d, err = f.svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{huge, descr("tenant", "t")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Verdicts[0]; v.Result != ResultRefused || v.Code.String() != "OVER_LIMIT" || v.Cost != 11 ||
		!strings.Contains(v.Reason, "max_cost 10") || v.Retry != 0 || v.HasReset {
		t.Errorf("refused: %+v", v)
	}
	if v := d.Verdicts[1]; v.Result != ResultOK || v.Remaining != 3 {
		t.Errorf("checked only, and the request before was over the limit: all 3 left: %+v", v)
	}
	if got := ResultShadowOverLimit.String(); got != "shadow_over_limit" {
		t.Errorf("label %q", got)
	}
}

// TestVerdictsDegraded: while the store fails, each verdict is a
// store_error whose code is the rule's on_store_error.
func TestVerdictsDegraded(t *testing.T) {
	svc, flaky, _ := flakyService(t, "local.yaml", localPolicy)
	flaky.fail = true
	d, err := svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "a"), descr("path", "/p")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Verdicts {
		if !v.Degraded() || v.Code.String() != "OK" {
			t.Errorf("descriptor %d: %+v", i, v)
		}
	}
	if v := d.Verdicts[0]; !v.HasReset || v.Remaining != 4 {
		t.Errorf("the local budget answered: %+v", v)
	}
	if v := d.Verdicts[1]; v.HasReset || v.Remaining != 0 {
		t.Errorf("on_store_error allow: %+v", v)
	}
}
