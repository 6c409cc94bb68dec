package rlswire

// The decoder reads a request twice. The first pass checks everything
// that could make it give up (so the second cannot fail) and counts what
// the message holds: descriptors, entries, optional sub-messages and
// string bytes. Then each kind is allocated once, at its count, and the
// second pass fills the generated structs, pointing into those arrays.
// One walker serves both passes (decoder.fill), so the two cannot read
// the wire differently.

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
	if !d.request(b, nil) {
		return false
	}
	d.allocate()
	req.Reset()
	d.request(b, req)
	return true
}

// decoder is the state of both passes. In the first (fill false) the n
// fields count; allocate makes the arrays and resets them, and in the
// second each is the next free element of its array.
type decoder struct {
	fill                                bool
	nDesc, nEntry, nLimit, nHits, nMult int
	nStr                                int // string bytes

	descs     []ratelimitv3.RateLimitDescriptor
	descPtrs  []*ratelimitv3.RateLimitDescriptor
	entries   []ratelimitv3.RateLimitDescriptor_Entry
	entryPtrs []*ratelimitv3.RateLimitDescriptor_Entry
	limits    []ratelimitv3.RateLimitDescriptor_RateLimitOverride
	hits      []wrapperspb.UInt64Value
	mults     []wrapperspb.UInt32Value
	strBuf    []byte
	str       string // strBuf, which nothing writes once the second pass is over
}

// allocate makes the arrays the first pass counted, and starts the second.
func (d *decoder) allocate() {
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
	if d.nMult > 0 {
		d.mults = make([]wrapperspb.UInt32Value, d.nMult)
	}
	if d.nStr > 0 {
		// The strings alias strBuf: it is written only by this decoder,
		// only before DecodeRequest returns, each byte once and before
		// the string that holds it is handed out.
		d.strBuf = make([]byte, d.nStr)
		d.str = unsafe.String(&d.strBuf[0], d.nStr)
	}
	d.fill = true
	d.nDesc, d.nEntry, d.nLimit, d.nHits, d.nMult, d.nStr = 0, 0, 0, 0, 0, 0
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

// string is a string field's value: in the first pass checked and
// counted, in the second copied into the request's string.
func (d *decoder) string(b []byte) (string, bool) {
	if !d.fill {
		d.nStr += len(b)
		return "", utf8.Valid(b)
	}
	if len(b) == 0 {
		return "", true
	}
	start := d.nStr
	d.nStr += copy(d.strBuf[start:], b)
	return d.str[start:d.nStr], true
}

// request reads a RateLimitRequest; req is nil in the first pass.
func (d *decoder) request(b []byte, req *rlsv3.RateLimitRequest) bool {
	for len(b) > 0 {
		num, v, payload, rest, ok := next(b, requestFields)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case 1:
			s, ok := d.string(payload)
			if !ok {
				return false
			}
			if d.fill {
				req.Domain = s
			}
		case 2:
			var desc *ratelimitv3.RateLimitDescriptor
			if d.fill {
				desc = &d.descs[d.nDesc]
				d.descPtrs[d.nDesc] = desc
				req.Descriptors = d.descPtrs[:d.nDesc+1]
			}
			d.nDesc++
			if !d.descriptor(payload, desc) {
				return false
			}
		case 3:
			if d.fill {
				req.HitsAddend = uint32(v)
			}
		}
	}
	return true
}

// descriptor reads a RateLimitDescriptor; desc is nil in the first pass.
// Its entries are the next ones of the request's array.
func (d *decoder) descriptor(b []byte, desc *ratelimitv3.RateLimitDescriptor) bool {
	first := d.nEntry
	for len(b) > 0 {
		num, v, payload, rest, ok := next(b, descriptorFields)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case 1:
			var e *ratelimitv3.RateLimitDescriptor_Entry
			if d.fill {
				e = &d.entries[d.nEntry]
				d.entryPtrs[d.nEntry] = e
				// Capped, so that an append to one descriptor's
				// entries cannot write over the next one's.
				desc.Entries = d.entryPtrs[first : d.nEntry+1 : d.nEntry+1]
			}
			d.nEntry++
			if !d.entry(payload, e) {
				return false
			}
		case 2:
			// A message field that comes again is merged into the
			// first: the first pass counts each, the second takes an
			// element only for the first.
			if !d.fill {
				d.nLimit++
			} else if desc.Limit == nil {
				desc.Limit = &d.limits[d.nLimit]
				d.nLimit++
			}
			if !d.override(payload, desc.GetLimit()) {
				return false
			}
		case 3:
			x, ok := wrapper(payload)
			if !ok {
				return false
			}
			if !d.fill {
				d.nHits++
				continue
			}
			if desc.HitsAddend == nil {
				desc.HitsAddend = &d.hits[d.nHits]
				d.nHits++
			}
			if x.set {
				desc.HitsAddend.Value = x.v
			}
		case 4:
			if d.fill {
				desc.IsNegativeHits = v != 0
			}
		}
	}
	return true
}

// entry reads a RateLimitDescriptor_Entry; e is nil in the first pass.
func (d *decoder) entry(b []byte, e *ratelimitv3.RateLimitDescriptor_Entry) bool {
	for len(b) > 0 {
		num, _, payload, rest, ok := next(b, entryFields)
		if !ok {
			return false
		}
		b = rest
		s, ok := d.string(payload)
		if !ok {
			return false
		}
		if !d.fill {
			continue
		}
		if num == 1 {
			e.Key = s
		} else {
			e.Value = s
		}
	}
	return true
}

// override reads a RateLimitOverride into o (nil in the first pass),
// merging into what an earlier occurrence left there.
func (d *decoder) override(b []byte, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) bool {
	for len(b) > 0 {
		num, v, payload, rest, ok := next(b, overrideFields)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case 1:
			if d.fill {
				o.RequestsPerUnit = uint32(v)
			}
		case 2:
			if d.fill {
				o.Unit = typev3.RateLimitUnit(int32(v))
			}
		case 3:
			x, ok := wrapper(payload)
			if !ok {
				return false
			}
			if !d.fill {
				d.nMult++
				continue
			}
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = &d.mults[d.nMult]
				d.nMult++
			}
			if x.set {
				o.UnitMultiplier.Value = uint32(x.v)
			}
		}
	}
	return true
}

// wrapped is a wrapper message's value: the last one given, if any.
type wrapped struct {
	v   uint64
	set bool
}

// wrapper reads a UInt64Value or UInt32Value (value = 1, a varint).
func wrapper(b []byte) (wrapped, bool) {
	var x wrapped
	for len(b) > 0 {
		_, v, _, rest, ok := next(b, wrapperFields)
		if !ok {
			return x, false
		}
		b = rest
		x = wrapped{v, true}
	}
	return x, true
}
