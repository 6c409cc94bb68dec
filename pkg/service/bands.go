package service

// A rule of several limits (policy.Band) has one store item per band for
// each descriptor, next to each other in its batch, so the request's one
// Decide decides them all or nothing. The verdict is the deciding band's:
// the one that refused the descriptor, else the one with the fewest
// tokens left.

import (
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/store"
)

// keySpan is where one item's key lies in reqState.keys.
type keySpan struct{ start, end int }

// addBands appends one item of ds's rule per band to its batch, each
// like it (cost, charge, revision) with the band's version and key at now.
func (rs *reqState) addBands(ds *desc, entries []policy.Entry, it store.Item, now int64) {
	b := rs.batch(ds.rule)
	ds.item, ds.bands = len(b.req.Items), len(ds.rule.Bands)
	for j := range ds.rule.Bands {
		start := len(rs.keys)
		rs.keys = ds.rule.AppendBandKey(rs.keys, entries, j, now)
		b.spans = append(b.spans, keySpan{start, len(rs.keys)})
		var end int64
		if bud := ds.rule.Bands[j].Budget; bud != nil {
			_, end = bud.Bounds(now)
		}
		b.ends = append(b.ends, end)
		it.Version = ds.rule.Bands[j].Version
		b.req.Items = append(b.req.Items, it)
	}
}

// items are ds's items of its batch, one per band.
func (ds *desc) items(b *batch) []store.Item { return b.req.Items[ds.item : ds.item+ds.bands] }

// bandResults are the answers to ds's items in results.
func (ds *desc) bandResults(results []store.Result) []store.Result {
	return results[ds.item : ds.item+ds.bands]
}

// covered reports whether every band of ds covered it.
func (ds *desc) covered(results []store.Result) bool {
	for _, r := range ds.bandResults(results) {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// deciding returns the band whose answer is ds's and that answer: of the
// bands that did not cover it, one never affordable, else the longest
// wait; when every band did, the one with the fewest tokens left; ties go
// to the earlier band. Forgiven is the most any band forgave of a report.
func (ds *desc) deciding(results []store.Result) (int, store.Result) {
	rs := ds.bandResults(results)
	best, forgiven := 0, rs[0].Forgiven
	for j := 1; j < len(rs); j++ {
		if decides(&rs[j], &rs[best]) {
			best = j
		}
		forgiven = max(forgiven, rs[j].Forgiven)
	}
	r := rs[best]
	r.Forgiven = forgiven
	return best, r
}

// decides reports whether band answer a decides over b.
func decides(a, b *store.Result) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case a.Allowed:
		return a.Remaining < b.Remaining
	case a.Never != b.Never:
		return a.Never
	}
	return a.RetryAfter > b.RetryAfter
}

// untilPeriodEnds sets the waits of the calendar budgets' answers (ends[i]
// > 0: the period's end): a budget never refills, so what it lacks, and
// whatever it has spent, comes back when its period ends and the next
// period's bucket is whole.
func untilPeriodEnds(ends []int64, results []store.Result, now int64) {
	for i, end := range ends {
		if end == 0 {
			continue
		}
		r := &results[i]
		wait := max(end-now, 1)
		if !r.Allowed && !r.Never {
			r.RetryAfter = wait
		}
		if r.ResetAfter > 0 {
			r.ResetAfter = wait
		}
	}
}
