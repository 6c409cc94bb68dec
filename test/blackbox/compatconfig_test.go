package blackbox

// "compat" means envoyproxy/ratelimit's format: the binary serving its
// configuration files.

import (
	"path/filepath"
	"testing"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/tgproc"
)

// The binary serves a directory of envoyproxy/ratelimit files (the
// reference's integration-test configuration, unchanged) and reloads it
// when a file of it changes.
func TestServeCompatDirectory(t *testing.T) {
	dir := t.TempDir()
	copyFiles(t, compatConfig+"integration", dir)
	p := start(t, "--policy", dir)
	r := p.Ask(t, "basic", 1, tgproc.Descriptor("key1", "foo"))
	if st := r.Statuses[0]; r.OverallCode != ok || st.LimitRemaining != 49 || st.CurrentLimit.GetRequestsPerUnit() != 50 || st.CurrentLimit.GetUnit().String() != "SECOND" {
		t.Fatalf("basic key1: %v", r)
	}
	for i := range 21 {
		r := p.Ask(t, "another", 1, tgproc.Descriptor("key2", "bar"))
		if want := ok; i == 20 {
			if r.OverallCode != over {
				t.Fatalf("key2 #%d: %v", i, r)
			}
		} else if r.OverallCode != want || r.Statuses[0].LimitRemaining != uint32(19-i) {
			t.Fatalf("key2 #%d: %v", i, r)
		}
	}
	tgproc.WritePolicy(t, filepath.Join(dir, "reload.yaml"), "domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 0}\n")
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Ask(t, "reload", 1, tgproc.Descriptor("block", "x")).OverallCode == over
	}, "the new file served")
}
