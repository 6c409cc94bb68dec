package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSetPolicyCountsRevisionDecreases: the first policy and every higher
// or equal revision count nothing; each lower one counts once.
func TestSetPolicyCountsRevisionDecreases(t *testing.T) {
	m := New(prometheus.NewRegistry())
	for _, step := range []struct {
		revision int64
		down     bool
	}{{-5, false}, {3, false}, {3, false}, {7, false}, {2, true}, {9, false}, {8, true}} {
		if got := m.SetPolicy(step.revision, "sha"); got != step.down {
			t.Errorf("revision %d: decreased %v, want %v", step.revision, got, step.down)
		}
	}
	if n := testutil.ToFloat64(m.RevisionDecreases); n != 2 {
		t.Errorf("tokengate_policy_revision_decreases_total %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.PolicyInfo.WithLabelValues("8", "sha")); n != 1 {
		t.Errorf("tokengate_policy_info of revision 8: %v", n)
	}
}
