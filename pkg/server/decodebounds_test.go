package server

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokengate/tokengate/internal/wiretest"
	"github.com/tokengate/tokengate/pkg/service"
)

// TestCheckShape: descriptors and entries are counted on the wire up to
// the service's limits; one more is refused; malformed data is left to
// the decoder.
func TestCheckShape(t *testing.T) {
	descriptors := func(n, entries int) wiretest.Wire {
		d := wiretest.Wire{}
		for range entries {
			d = d.Msg(1, wiretest.Entry("k", "v"))
		}
		w := wiretest.Wire{}.Str(1, "edge")
		for range n {
			w = w.Msg(2, d)
		}
		return w.Varint(3, 1)
	}
	for _, tc := range []struct {
		name string
		wire []byte
		want string // "" for nil
	}{
		{"at the limits", descriptors(service.MaxDescriptors, service.MaxEntries), ""},
		{"one descriptor more", descriptors(service.MaxDescriptors+1, 1), "more than 64 descriptors"},
		{"one entry more", descriptors(2, service.MaxEntries+1), "descriptor 1: more than 32 entries"},
		{"truncated", descriptors(3, 2)[:20], ""},
		{"bad tag", []byte{0xff, 0xff, 0xff}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkShape(tc.wire)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkShape: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDecodeGate: large messages decode at most decodeBudget bytes at
// once, and one larger than the budget alone.
func TestDecodeGate(t *testing.T) {
	g := newDecodeGate()
	var in, most atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		size := 64<<10 + i*(48<<10) // up to about 3 MiB, over the budget
		wg.Go(func() {
			leave := g.enter(size)
			w := int64(min(size, decodeBudget))
			now := in.Add(w)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			in.Add(-w)
			leave()
		})
	}
	wg.Wait()
	if m := most.Load(); m > decodeBudget {
		t.Fatalf("%d bytes decoding at once, budget %d", m, decodeBudget)
	}
	if len(g.chunks) != 0 {
		t.Fatalf("%d chunks still held after every message left", len(g.chunks))
	}
}
