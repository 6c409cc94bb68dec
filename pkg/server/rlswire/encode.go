package rlswire

// The encoder is vtprotobuf's design: a pass that sizes the message, then
// one that writes it from the end of a buffer of that size towards its
// start, so that a sub-message's length is known, once written, before
// its tag and length go in front of it; nothing is sized twice. Fields
// are written last first, so that they stand in proto's order: by number,
// a oneof's member after the other fields (putQuota). Every field number
// here is below 16: a tag is one byte.

import (
	"encoding/binary"
	"math"
	"math/bits"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// ResponseSize is the length of resp's encoding.
func ResponseSize(resp *rlsv3.RateLimitResponse) int {
	if resp == nil {
		return 0
	}
	n := sizeVarint(uint64(resp.OverallCode))
	for _, st := range resp.Statuses {
		n += sizeMessage(sizeStatus(st))
	}
	n += sizeHeaders(resp.ResponseHeadersToAdd) + sizeHeaders(resp.RequestHeadersToAdd)
	if len(resp.RawBody) > 0 {
		n += sizeMessage(len(resp.RawBody))
	}
	if resp.DynamicMetadata != nil {
		n += sizeMessage(sizeStruct(resp.DynamicMetadata))
	}
	if resp.Quota != nil {
		n += sizeMessage(sizeQuota(resp.Quota))
	}
	return n
}

// MarshalResponse writes resp's encoding into b, which must be
// ResponseSize(resp) bytes long (it panics otherwise).
func MarshalResponse(b []byte, resp *rlsv3.RateLimitResponse) {
	i := len(b)
	if resp != nil {
		i = putResponse(b, i, resp)
	}
	if i != 0 {
		panic("rlswire: MarshalResponse: buffer is not ResponseSize long")
	}
}

// Tags: field number << 3 | wire type (varint 0, fixed64 1,
// length-delimited 2).
const (
	tagVarint1, tagVarint2, tagVarint3, tagVarint4 = 1 << 3, 2 << 3, 3 << 3, 4 << 3
	tagFixed64x2                                   = 2<<3 | 1
	tagBytes1, tagBytes2, tagBytes3, tagBytes4     = 1<<3 | 2, 2<<3 | 2, 3<<3 | 2, 4<<3 | 2
	tagBytes5, tagBytes6, tagBytes7                = 5<<3 | 2, 6<<3 | 2, 7<<3 | 2
)

// varintLen is protowire.SizeVarint, by a formula the compiler finds
// cheaper to inline (vtprotobuf's).
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// sizeVarint is a varint field of v; 0 for 0, which proto3 does not write.
func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + varintLen(v)
}

// sizeMessage is a length-delimited field of n bytes, written even empty.
func sizeMessage(n int) int { return 1 + varintLen(uint64(n)) + n }

// sizeString is a string or bytes field of n bytes; 0 for none.
func sizeString(n int) int {
	if n == 0 {
		return 0
	}
	return sizeMessage(n)
}

func sizeStatus(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	if st == nil {
		return 0
	}
	n := sizeVarint(uint64(st.Code)) + sizeVarint(uint64(st.LimitRemaining))
	if st.CurrentLimit != nil {
		n += sizeMessage(sizeRateLimit(st.CurrentLimit))
	}
	if st.DurationUntilReset != nil {
		n += sizeMessage(sizeSecondsNanos(st.DurationUntilReset.Seconds, st.DurationUntilReset.Nanos))
	}
	if st.Quota != nil {
		n += sizeMessage(sizeQuota(st.Quota))
	}
	return n
}

func sizeRateLimit(l *rlsv3.RateLimitResponse_RateLimit) int {
	n := sizeVarint(uint64(l.RequestsPerUnit)) + sizeVarint(uint64(l.Unit)) + sizeString(len(l.Name))
	if l.UnitMultiplier != nil {
		n += sizeMessage(sizeVarint(uint64(l.UnitMultiplier.Value)))
	}
	return n
}

// sizeSecondsNanos is the size of a Duration or a Timestamp.
func sizeSecondsNanos(seconds int64, nanos int32) int {
	return sizeVarint(uint64(seconds)) + sizeVarint(uint64(nanos))
}

func sizeQuota(q *rlsv3.RateLimitResponse_Quota) int {
	n := sizeVarint(uint64(q.Requests)) + sizeString(len(q.Id))
	if v, ok := q.ExpirationSpecifier.(*rlsv3.RateLimitResponse_Quota_ValidUntil); ok {
		n += sizeMessage(sizeSecondsNanos(v.ValidUntil.GetSeconds(), v.ValidUntil.GetNanos()))
	}
	return n
}

func sizeHeaders(hs []*corev3.HeaderValue) int {
	n := 0
	for _, h := range hs {
		s := 0
		if h != nil {
			s = sizeString(len(h.Key)) + sizeString(len(h.Value)) + sizeString(len(h.RawValue))
		}
		n += sizeMessage(s)
	}
	return n
}

// The writers below write their field or message into b before b[i:],
// which is written, and return where it starts: the vtprotobuf style,
// which keeps b and i in registers.

func putTag(b []byte, i int, tag byte) int {
	i--
	b[i] = tag
	return i
}

// putTagged writes a tag and a varint: a varint field, or a length.
func putTagged(b []byte, i int, tag byte, v uint64) int {
	i -= varintLen(v) + 1
	b[i] = tag
	j := i + 1
	for ; v >= 0x80; v >>= 7 {
		b[j] = byte(v) | 0x80
		j++
	}
	b[j] = byte(v)
	return i
}

// putField writes a varint field, unless v is 0.
func putField(b []byte, i int, tag byte, v uint64) int {
	if v == 0 {
		return i
	}
	return putTagged(b, i, tag, v)
}

// closeMessage writes the tag and length of the sub-message written
// from i to end.
func closeMessage(b []byte, i int, tag byte, end int) int {
	return putTagged(b, i, tag, uint64(end-i))
}

// putString writes a string field, unless s is empty.
func putString(b []byte, i int, tag byte, s string) int {
	if s == "" {
		return i
	}
	return putStringAlways(b, i, tag, s)
}

// putStringAlways writes a string field, empty or not (a map key, a
// oneof's member).
func putStringAlways(b []byte, i int, tag byte, s string) int {
	i -= len(s)
	copy(b[i:], s)
	return putTagged(b, i, tag, uint64(len(s)))
}

// putBytes writes a bytes field, unless v is empty.
func putBytes(b []byte, i int, tag byte, v []byte) int {
	if len(v) == 0 {
		return i
	}
	i -= len(v)
	copy(b[i:], v)
	return putTagged(b, i, tag, uint64(len(v)))
}

// putDouble writes a fixed64 field, whatever its value (a oneof's).
func putDouble(b []byte, i int, tag byte, f float64) int {
	i -= 8
	binary.LittleEndian.PutUint64(b[i:], math.Float64bits(f))
	return putTag(b, i, tag)
}

// putSecondsNanos writes the fields of a Duration or a Timestamp.
func putSecondsNanos(b []byte, i int, seconds int64, nanos int32) int {
	return putField(b, putField(b, i, tagVarint2, uint64(nanos)), tagVarint1, uint64(seconds))
}

func putResponse(b []byte, i int, resp *rlsv3.RateLimitResponse) int {
	if resp.Quota != nil {
		end := i
		i = closeMessage(b, putQuota(b, i, resp.Quota), tagBytes7, end)
	}
	if resp.DynamicMetadata != nil {
		end := i
		i = closeMessage(b, putStruct(b, i, resp.DynamicMetadata), tagBytes6, end)
	}
	i = putBytes(b, i, tagBytes5, resp.RawBody)
	i = putHeaders(b, i, tagBytes4, resp.RequestHeadersToAdd)
	i = putHeaders(b, i, tagBytes3, resp.ResponseHeadersToAdd)
	for k := len(resp.Statuses) - 1; k >= 0; k-- {
		end := i
		if st := resp.Statuses[k]; st != nil {
			i = putStatus(b, i, st)
		}
		i = closeMessage(b, i, tagBytes2, end)
	}
	return putField(b, i, tagVarint1, uint64(resp.OverallCode))
}

func putStatus(b []byte, i int, st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	if st.Quota != nil {
		end := i
		i = closeMessage(b, putQuota(b, i, st.Quota), tagBytes5, end)
	}
	if d := st.DurationUntilReset; d != nil {
		end := i
		i = closeMessage(b, putSecondsNanos(b, i, d.Seconds, d.Nanos), tagBytes4, end)
	}
	i = putField(b, i, tagVarint3, uint64(st.LimitRemaining))
	if l := st.CurrentLimit; l != nil {
		end := i
		i = closeMessage(b, putRateLimit(b, i, l), tagBytes2, end)
	}
	return putField(b, i, tagVarint1, uint64(st.Code))
}

func putRateLimit(b []byte, i int, l *rlsv3.RateLimitResponse_RateLimit) int {
	if l.UnitMultiplier != nil {
		end := i
		i = closeMessage(b, putField(b, i, tagVarint1, uint64(l.UnitMultiplier.Value)), tagBytes4, end)
	}
	i = putString(b, i, tagBytes3, l.Name)
	i = putField(b, i, tagVarint2, uint64(l.Unit))
	return putField(b, i, tagVarint1, uint64(l.RequestsPerUnit))
}

// putQuota writes a Quota as proto does: its oneof (valid_until) after
// the other fields.
func putQuota(b []byte, i int, q *rlsv3.RateLimitResponse_Quota) int {
	if v, ok := q.ExpirationSpecifier.(*rlsv3.RateLimitResponse_Quota_ValidUntil); ok {
		end := i
		if t := v.ValidUntil; t != nil {
			i = putSecondsNanos(b, i, t.Seconds, t.Nanos)
		}
		i = closeMessage(b, i, tagBytes2, end)
	}
	i = putString(b, i, tagBytes3, q.Id)
	return putField(b, i, tagVarint1, uint64(q.Requests))
}

func putHeaders(b []byte, i int, tag byte, hs []*corev3.HeaderValue) int {
	for k := len(hs) - 1; k >= 0; k-- {
		end := i
		if h := hs[k]; h != nil {
			i = putBytes(b, i, tagBytes3, h.RawValue)
			i = putString(b, i, tagBytes2, h.Value)
			i = putString(b, i, tagBytes1, h.Key)
		}
		i = closeMessage(b, i, tag, end)
	}
	return i
}
