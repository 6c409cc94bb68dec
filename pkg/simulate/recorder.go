package simulate

import (
	"context"
	"strings"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// recorder is the store as the service sees it: every call goes to the
// real store unchanged, and the recorder keeps what the store answered,
// item by item, for the simulator to count once the service has decided
// the request. The service makes at most two calls per request (the
// enforced descriptors, then the shadow ones) and never keeps a store of
// its own, so the two calls of the last request are all it has to keep.
type recorder struct {
	st    store.Store
	calls []storeCall // this request's calls, in order
	// keys numbers bucket keys. With grow, every new key is added (to
	// count decisions per bucket); without, only the keys already there
	// are followed and every other key is -1. nil: no key is followed.
	keys     map[string]int32
	names    []string          // with grow: the keys by number
	versions []*bucket.Version // with grow: each key's version when first seen
	grow     bool
}

var _ store.Store = (*recorder)(nil)

// storeCall is one Decide: its items, their results and the outcome.
type storeCall struct {
	items []decided
	keys  []byte // the items' keys, back to back
	out   store.Outcome
}

type decided struct {
	version    *bucket.Version
	cost       int64
	charge     store.Charge
	result     store.Result
	key        int32 // the key's number in recorder.keys, -1 if none
	start, end int   // the key in storeCall.keys
}

// keyIs says whether item i's key is k.
func (c *storeCall) keyIs(i int, k []byte) bool {
	return string(c.keys[c.items[i].start:c.items[i].end]) == string(k)
}

func (r *recorder) reset() { r.calls = r.calls[:0] }

// Decide implements store.Store.
func (r *recorder) Decide(ctx context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	out, err := r.st.Decide(ctx, req, results)
	if err != nil {
		return out, err
	}
	if len(r.calls) < cap(r.calls) {
		r.calls = r.calls[:len(r.calls)+1]
	} else {
		r.calls = append(r.calls, storeCall{})
	}
	c := &r.calls[len(r.calls)-1]
	c.items, c.keys, c.out = c.items[:0], c.keys[:0], out
	for i, it := range req.Items {
		start := len(c.keys)
		c.keys = append(c.keys, it.Key...)
		c.items = append(c.items, decided{version: it.Version, cost: it.Cost, charge: it.Charge, result: results[i], key: r.key(it.Key, it.Version), start: start, end: len(c.keys)})
	}
	return out, nil
}

// key numbers a bucket key, of version v. The key aliases the service's
// buffer, so a new one is copied.
func (r *recorder) key(k string, v *bucket.Version) int32 {
	if r.keys == nil {
		return -1
	}
	if n, ok := r.keys[k]; ok {
		return n
	}
	if !r.grow {
		return -1
	}
	n := int32(len(r.names))
	k = strings.Clone(k)
	r.keys[k], r.names, r.versions = n, append(r.names, k), append(r.versions, v)
	return n
}
