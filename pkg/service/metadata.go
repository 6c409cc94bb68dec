package service

import (
	"unsafe"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tokengate/tokengate/pkg/keyhash"
)

// Keys of the dynamic_metadata a response carries when a descriptor was
// limited or degraded; Envoy's ratelimit filter puts it under its own
// namespace, so an access log reads them as
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:rule)%. The top-level keys
// describe the descriptor that decided the answer (the first over the
// limit, else the first degraded); when several were limited or degraded,
// MetaDescriptors lists each with the same keys (no domain) and its index.
const (
	MetaDomain      = "domain"
	MetaRule        = "rule"
	MetaResult      = "result"      // the metric label: over_limit, refused, store_error
	MetaKey         = "key"         // hashed bucket key (keyhash.Length hex digits); no client value
	MetaCost        = "cost"        // asked of the bucket; negative: a refund
	MetaRemaining   = "remaining"   // whole tokens left
	MetaDebt        = "debt"        // whole tokens below zero (a post-paid rule's); absent when none
	MetaRetryAfter  = "retry_after" // whole seconds; at the top level the response's Retry-After
	MetaReason      = "reason"      // why it can never pass as it is; absent when none
	MetaDegraded    = "degraded"    // on_store_error answered
	MetaIndex       = "index"       // the descriptor's place in the request
	MetaDescriptors = "descriptors" // at most MaxMetaDescriptors of them
	MetaCount       = "count"       // with MetaDescriptors: how many were limited or degraded in all
)

// MaxMetaDescriptors bounds the descriptors MetaDescriptors lists, the
// first ones in the request: a degraded request of 64 descriptors (every
// one answered by on_store_error while the store fails) would otherwise
// carry 64 entries, each hashed, to Envoy.
const MaxMetaDescriptors = 8

// keyHashTo writes the hashed key of the verdict at index i into dst and
// reports whether the descriptor has a bucket key (it has none without a
// rule, or refused before the store). The hash is keyed (Options.KeyHash):
// without the secret, trying values (every IPv4 address) finds nothing;
// with it, tokengate explain prints the same name for a descriptor.
func (rs *reqState) keyHashTo(dst *[keyhash.Length]byte, i int) bool {
	ds := &rs.descs[i]
	if ds.item < 0 {
		return false
	}
	sp := rs.batch(ds.rule).spans[ds.item+ds.band]
	rs.keyHasher.Sum(dst, rs.keys[sp.start:sp.end])
	return true
}

// keyHash is keyHashTo as a string, "" without a bucket key.
func (rs *reqState) keyHash(i int) string {
	var k [keyhash.Length]byte
	if !rs.keyHashTo(&k, i) {
		return ""
	}
	return string(k[:])
}

// deciding is the index of the verdict that decided a response (the first
// over the limit, else the first degraded), -1 when none did.
func deciding(vs []Verdict) int {
	first := -1
	for i := range vs {
		switch {
		case vs[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			return i
		case first < 0 && vs[i].Degraded():
			first = i
		}
	}
	return first
}

// Values every metadata shares, read only (as the rules' current_limit and
// their metaRule and metaDomain are): results, booleans, and the small
// whole numbers that most costs, balances and waits are.
var (
	metaResults = func() (vs [numResults]*structpb.Value) {
		for r := range vs {
			vs[r] = structpb.NewStringValue(Result(r).String())
		}
		return vs
	}()
	metaBools   = [2]*structpb.Value{structpb.NewBoolValue(false), structpb.NewBoolValue(true)}
	metaNumbers = func() (vs [256]*structpb.Value) {
		for n := range vs {
			vs[n] = structpb.NewNumberValue(float64(n))
		}
		return vs
	}()
)

// metaNumber is n as a metadata value, shared when it is small.
func metaNumber(n int64) *structpb.Value {
	if n >= 0 && n < int64(len(metaNumbers)) {
		return metaNumbers[n]
	}
	return structpb.NewNumberValue(float64(n))
}

// metaBlock holds what of one descriptor's metadata is its own, so that
// it costs one allocation (none for the top level: it lives in the
// response's).
type metaBlock struct {
	top  structpb.Struct
	key  structpb.Value
	keyK structpb.Value_StringValue
	hash [keyhash.Length]byte
}

// metadata is the response's dynamic_metadata, written into top's block:
// the verdict top, that decided (with retryAfter, the response's wait),
// and, when several descriptors were limited or degraded, the first
// MaxMetaDescriptors of them under MetaDescriptors and their number.
func (rs *reqState) metadata(domain string, vs []Verdict, top int, retryAfter int64, blk *metaBlock) *structpb.Struct {
	f := rs.metaFields(top, &vs[top], retryAfter, blk)
	f[MetaDomain] = vs[top].info.metaDomain
	n := 0
	for i := range vs {
		if vs[i].notable() {
			n++
		}
	}
	if n > 1 {
		list := make([]*structpb.Value, 0, min(n, MaxMetaDescriptors))
		for i := range vs {
			if v := &vs[i]; v.notable() && len(list) < MaxMetaDescriptors {
				b := new(metaBlock)
				df := rs.metaFields(i, v, CeilSeconds(v.Retry), b)
				df[MetaIndex] = metaNumber(int64(i))
				list = append(list, structpb.NewStructValue(&b.top))
			}
		}
		f[MetaDescriptors] = structpb.NewListValue(&structpb.ListValue{Values: list})
		f[MetaCount] = metaNumber(int64(n))
	}
	return &blk.top
}

// metaFields makes blk.top the metadata of verdict i and returns its fields.
func (rs *reqState) metaFields(i int, v *Verdict, retryAfter int64, blk *metaBlock) map[string]*structpb.Value {
	f := make(map[string]*structpb.Value, 8)
	f[MetaRule] = v.info.metaRule
	f[MetaResult] = metaResults[v.Result]
	f[MetaDegraded] = metaBools[b2i(v.Degraded())]
	f[MetaCost] = metaNumber(v.Cost)
	f[MetaRemaining] = metaNumber(v.Remaining)
	f[MetaRetryAfter] = metaNumber(retryAfter)
	if rs.keyHashTo(&blk.hash, i) {
		blk.keyK.StringValue = unsafe.String(&blk.hash[0], len(blk.hash))
		blk.key.Kind = &blk.keyK
		f[MetaKey] = &blk.key
	}
	if v.Reason != "" {
		f[MetaReason] = structpb.NewStringValue(v.Reason)
	}
	if v.Debt > 0 {
		f[MetaDebt] = metaNumber(v.Debt)
	}
	blk.top.Fields = f
	return f
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
