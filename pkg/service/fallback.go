package service

import (
	"context"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// fallback is the local budget's decision of the enforced items whose rule
// says on_store_error: local, made when the store failed. Like the store
// it is all or nothing over those items; when another enforced rule of the
// request denies (on_store_error: deny), the request is over the limit
// anyway, so the local budget only checks and charges nothing but the
// reports.
type fallback struct {
	req     store.Request
	results []store.Result
	index   []int   // batch item -> index in req.Items, -1 when not local
	ends    []int64 // each item's period end (batch.ends)
	out     store.Outcome
	err     error
	ran     bool
}

func (f *fallback) reset() {
	f.req.Items, f.index, f.ends = f.req.Items[:0], f.index[:0], f.ends[:0]
	f.out, f.err, f.ran = store.Outcome{}, nil, false
}

func (rs *reqState) decideLocal(ctx context.Context, local store.Store) {
	b := &rs.enforced
	f := &b.local
	for range b.req.Items {
		f.index = append(f.index, -1)
	}
	deny := false
	for i := range rs.descs {
		ds := &rs.descs[i]
		if ds.item < 0 || ds.rule.Shadow {
			continue
		}
		switch ds.rule.OnStoreError {
		case policy.StoreErrorLocal:
			for j, it := range ds.items(b) {
				f.index[ds.item+j] = len(f.req.Items)
				// Decided without the id: a local budget holds nothing.
				it.Reserve, it.ReserveTTL = 0, 0
				f.req.Items = append(f.req.Items, it)
				f.ends = append(f.ends, b.ends[ds.item+j])
			}
		case policy.StoreErrorDeny:
			deny = true
		}
	}
	if len(f.req.Items) == 0 {
		return
	}
	if deny {
		uncharged(f.req.Items)
	}
	f.req.Now, f.req.ID = b.req.Now, ""
	if cap(f.results) < len(f.req.Items) {
		f.results = make([]store.Result, len(f.req.Items))
	}
	f.results = f.results[:len(f.req.Items)]
	f.out, f.err = local.Decide(ctx, &f.req, f.results)
	if f.err == nil {
		untilPeriodEnds(f.ends, f.results, f.req.Now)
	}
	f.ran = true
}

// localResult is the local budget's answer for ds, if it made one.
func (rs *reqState) localResult(ds *desc) (store.Result, bool) {
	if ds.rule.Shadow || ds.item < 0 {
		return store.Result{}, false
	}
	f := &rs.enforced.local
	if !f.ran || f.err != nil || ds.item >= len(f.index) || f.index[ds.item] < 0 {
		return store.Result{}, false
	}
	// The local items of ds follow one another, as in the batch.
	local := desc{item: f.index[ds.item], bands: ds.bands}
	var r store.Result
	ds.band, r = local.deciding(f.results)
	// All or nothing across the local items, as a store answers.
	r.Allowed = r.Allowed && f.out.Allowed
	return r, true
}

// fallbackAllows reports whether ds, whose store failed, is answered OK:
// on_store_error allow, or local with the local budget allowing it.
func (rs *reqState) fallbackAllows(ds *desc) bool {
	switch ds.rule.OnStoreError {
	case policy.StoreErrorAllow:
		return true
	case policy.StoreErrorLocal:
		r, ok := rs.localResult(ds)
		return ok && r.Allowed
	}
	return false
}
