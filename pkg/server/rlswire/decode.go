package rlswire

// The decoder reads a request twice. A shallow first pass counts the
// descriptors and, in each, the entries, limits and hits_addends, without
// reading further. Then each kind is allocated once, at its count, and
// one byte array for the strings as long as the request (their bytes
// cannot be more), and the second pass reads all of the request, checks
// it and fills the generated structs, pointing into those arrays. The
// request is written only once the second pass has taken all of it.

import (
	"unicode/utf8"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// DecodeRequest decodes b into req, as proto.Unmarshal does, and reports
// true; or reports false, req untouched, for any b it does not take (see
// the package comment). req's previous contents are discarded. b is not
// retained.
func DecodeRequest(b []byte, req *rlsv3.RateLimitRequest) bool {
	var d decoder
	if !d.count(b) {
		return false
	}
	d.allocate(len(b))
	if !d.request(b) {
		return false
	}
	req.Reset()
	req.Domain, req.HitsAddend = d.domain, d.hitsAddend
	if d.nDesc > 0 {
		req.Descriptors = d.descPtrs
	}
	return true
}

// decoder is the state of both passes. The first counts in the n fields;
// allocate makes the arrays and resets them, and in the second each is
// the next free element of its array.
type decoder struct {
	nDesc, nEntry, nLimit, nHits, nMult int
	nStr                                int // string bytes

	descs     []ratelimitv3.RateLimitDescriptor
	descPtrs  []*ratelimitv3.RateLimitDescriptor
	entries   []ratelimitv3.RateLimitDescriptor_Entry
	entryPtrs []*ratelimitv3.RateLimitDescriptor_Entry
	limits    []ratelimitv3.RateLimitDescriptor_RateLimitOverride
	hits      []wrapperspb.UInt64Value
	mults     []wrapperspb.UInt32Value // made at the first, one per limit
	strBuf    []byte
	str       string // strBuf, which nothing writes once the second pass is over

	domain     string
	hitsAddend uint32
}

// count is the first pass. It gives up on what the second would at the
// two levels it reads, so that the second never finds more than counted.
func (d *decoder) count(b []byte) bool {
	for len(b) > 0 {
		num, _, desc, rest, ok := next(b, requestFields)
		if !ok {
			return false
		}
		b = rest
		if num != 2 {
			continue
		}
		d.nDesc++
		for len(desc) > 0 {
			num, _, _, rest, ok := next(desc, descriptorFields)
			if !ok {
				return false
			}
			desc = rest
			switch num {
			case 1:
				d.nEntry++
			case 2:
				d.nLimit++
			case 3:
				d.nHits++
			}
		}
	}
	return true
}

// allocate makes the arrays the first pass counted, strings for a
// request of n bytes, and starts the second pass.
func (d *decoder) allocate(n int) {
	d.descs = make([]ratelimitv3.RateLimitDescriptor, d.nDesc)
	d.descPtrs = make([]*ratelimitv3.RateLimitDescriptor, d.nDesc)
	if d.nEntry > 0 {
		d.entries = make([]ratelimitv3.RateLimitDescriptor_Entry, d.nEntry)
		d.entryPtrs = make([]*ratelimitv3.RateLimitDescriptor_Entry, d.nEntry)
	}
	if d.nLimit > 0 {
		d.limits = make([]ratelimitv3.RateLimitDescriptor_RateLimitOverride, d.nLimit)
	}
	if d.nHits > 0 {
		d.hits = make([]wrapperspb.UInt64Value, d.nHits)
	}
	if n > 0 {
		// The strings alias strBuf: it is written only by this decoder,
		// only before DecodeRequest returns, each byte once and before
		// the string that holds it is made.
		d.strBuf = make([]byte, n)
		d.str = unsafe.String(&d.strBuf[0], n)
	}
	d.nDesc, d.nEntry, d.nLimit, d.nHits = 0, 0, 0, 0
}

// Fields of each message by number (field 1 first): v a varint, b
// length-delimited.
const (
	requestFields    = "bbv"  // domain, descriptors, hits_addend
	descriptorFields = "bbbv" // entries, limit, hits_addend, is_negative_hits
	entryFields      = "bb"   // key, value
	overrideFields   = "vvb"  // requests_per_unit, unit, unit_multiplier
	wrapperFields    = "v"    // value
)

// next reads the next field of a message whose fields are kinds: its
// number, and a varint's value or a length-delimited field's bytes; rest
// is what follows. ok is false for a field kinds does not have, one of
// another wire type, and malformed data. Tags and lengths are read as
// protowire.ConsumeTag and ConsumeBytes read them, a one-byte one (nearly
// all) without a call.
func next(b []byte, kinds string) (num int, v uint64, payload, rest []byte, ok bool) {
	var tag uint64
	n := 1
	if len(b) > 0 && b[0] < 0x80 {
		tag = uint64(b[0])
	} else if tag, n = protowire.ConsumeVarint(b); n < 0 {
		return 0, 0, nil, nil, false
	}
	// ConsumeTag refuses 0 and what does not fit an int32: neither is
	// in kinds.
	if tag>>3 == 0 || tag>>3 > uint64(len(kinds)) {
		return 0, 0, nil, nil, false
	}
	num, b = int(tag>>3), b[n:]
	if n = 1; len(b) > 0 && b[0] < 0x80 {
		v = uint64(b[0])
	} else if v, n = protowire.ConsumeVarint(b); n < 0 {
		return 0, 0, nil, nil, false
	}
	switch typ := protowire.Type(tag & 7); {
	case kinds[num-1] == 'v' && typ == protowire.VarintType:
		return num, v, nil, b[n:], true
	case kinds[num-1] == 'b' && typ == protowire.BytesType && v <= uint64(len(b)-n):
		return num, 0, b[n : n+int(v)], b[n+int(v):], true
	}
	return 0, 0, nil, nil, false
}

// fields calls f with each field of b, a message whose fields are kinds
// (next), and reports whether it read all of them and f said true to
// each.
func fields(b []byte, kinds string, f func(num int, v uint64, payload []byte) bool) bool {
	for len(b) > 0 {
		num, v, payload, rest, ok := next(b, kinds)
		if !ok || !f(num, v, payload) {
			return false
		}
		b = rest
	}
	return true
}

// string is a string field's value, checked and copied into the
// request's string.
func (d *decoder) string(b []byte) (string, bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	if len(b) == 0 {
		return "", true
	}
	start := d.nStr
	d.nStr += copy(d.strBuf[start:], b)
	return d.str[start:d.nStr], true
}

// request reads a RateLimitRequest.
func (d *decoder) request(b []byte) bool {
	return fields(b, requestFields, func(num int, v uint64, payload []byte) bool {
		ok := true
		switch num {
		case 1:
			d.domain, ok = d.string(payload)
		case 2:
			desc := &d.descs[d.nDesc]
			d.descPtrs[d.nDesc] = desc
			d.nDesc++
			ok = d.descriptor(payload, desc)
		case 3:
			d.hitsAddend = uint32(v)
		}
		return ok
	})
}

// descriptor reads a RateLimitDescriptor. Its entries are the next ones
// of the request's array.
func (d *decoder) descriptor(b []byte, desc *ratelimitv3.RateLimitDescriptor) bool {
	first := d.nEntry
	ok := fields(b, descriptorFields, func(num int, v uint64, payload []byte) bool {
		switch num {
		case 1:
			e := &d.entries[d.nEntry]
			d.entryPtrs[d.nEntry] = e
			d.nEntry++
			return d.entry(payload, e)
		case 2:
			// A message field that comes again is merged into the
			// first.
			if desc.Limit == nil {
				desc.Limit = &d.limits[d.nLimit]
				d.nLimit++
			}
			return d.override(payload, desc.Limit)
		case 3:
			x, set, ok := wrapper(payload)
			if !ok {
				return false
			}
			if desc.HitsAddend == nil {
				desc.HitsAddend = &d.hits[d.nHits]
				d.nHits++
			}
			if set {
				desc.HitsAddend.Value = x
			}
			return true
		}
		desc.IsNegativeHits = v != 0
		return true
	})
	if d.nEntry > first {
		// Capped, so that an append to one descriptor's entries cannot
		// write over the next one's.
		desc.Entries = d.entryPtrs[first:d.nEntry:d.nEntry]
	}
	return ok
}

// entry reads a RateLimitDescriptor_Entry.
func (d *decoder) entry(b []byte, e *ratelimitv3.RateLimitDescriptor_Entry) bool {
	return fields(b, entryFields, func(num int, _ uint64, payload []byte) bool {
		s, ok := d.string(payload)
		if num == 1 {
			e.Key = s
		} else {
			e.Value = s
		}
		return ok
	})
}

// override reads a RateLimitOverride into o, merging into what an
// earlier occurrence left there.
func (d *decoder) override(b []byte, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) bool {
	return fields(b, overrideFields, func(num int, v uint64, payload []byte) bool {
		switch num {
		case 1:
			o.RequestsPerUnit = uint32(v)
		case 2:
			o.Unit = typev3.RateLimitUnit(int32(v))
		default:
			x, set, ok := wrapper(payload)
			if !ok {
				return false
			}
			if o.UnitMultiplier == nil {
				if d.mults == nil {
					d.mults = make([]wrapperspb.UInt32Value, len(d.limits))
				}
				o.UnitMultiplier = &d.mults[d.nMult]
				d.nMult++
			}
			if set {
				o.UnitMultiplier.Value = uint32(x)
			}
		}
		return true
	})
}

// wrapper reads a UInt64Value or UInt32Value (value = 1, a varint): the
// last value given, and whether one was.
func wrapper(b []byte) (v uint64, set, ok bool) {
	ok = fields(b, wrapperFields, func(_ int, x uint64, _ []byte) bool {
		v, set = x, true
		return true
	})
	return v, set, ok
}
