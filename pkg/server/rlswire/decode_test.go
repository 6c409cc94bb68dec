package rlswire

import (
	"bytes"
	"fmt"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/protorand"
	"github.com/tokengate/tokengate/internal/wiretest"
)

type wire = wiretest.Wire

// sentinel is what a request holds before a decode that must leave it
// untouched when it gives up.
func sentinel() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "untouched", HitsAddend: 9}
}

// tb is what of testing.TB and rapid.T the checks use.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// agrees fails t unless DecodeRequest either gives up on b, leaving the
// request as it was, or decodes what proto.Unmarshal decodes. It reports
// whether DecodeRequest took b.
func agrees(t tb, b []byte) bool {
	t.Helper()
	want := new(rlsv3.RateLimitRequest)
	perr := proto.Unmarshal(b, want)
	got := sentinel()
	if !DecodeRequest(b, got) {
		if !proto.Equal(got, sentinel()) {
			t.Fatalf("%x: gave up, but changed the request: %v", b, got)
		}
		return false
	}
	if perr != nil {
		t.Fatalf("%x: proto.Unmarshal refuses it (%v), DecodeRequest decoded %v", b, perr, got)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%x: DecodeRequest decoded\n%v\nproto.Unmarshal\n%v", b, got, want)
	}
	return true
}

// takes fails t unless DecodeRequest decodes b, as proto.Unmarshal does.
func takes(t tb, b []byte) {
	t.Helper()
	if !agrees(t, b) {
		t.Fatalf("%x: DecodeRequest gave up on a request of the fields it decodes", b)
	}
}

// randomString is a string a RateLimitRequest carries: often empty or a
// header-like value, else any valid UTF-8 (non-ASCII runes included).
var randomString = rapid.OneOf(rapid.Just(""), rapid.StringMatching(`[a-z_]{1,8}[0-9]{0,3}`), rapid.StringN(0, 24, -1))

// randomRequest is a RateLimitRequest of up to 20 descriptors of up to 6
// entries, each optional field set or not.
func randomRequest(t *rapid.T) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: randomString.Draw(t, "domain")}
	if rapid.Bool().Draw(t, "request hits") {
		req.HitsAddend = rapid.Uint32().Draw(t, "hits_addend")
	}
	for range rapid.IntRange(0, 20).Draw(t, "descriptors") {
		d := new(ratelimitv3.RateLimitDescriptor)
		for range rapid.IntRange(0, 6).Draw(t, "entries") {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{
				Key: randomString.Draw(t, "key"), Value: randomString.Draw(t, "value"),
			})
		}
		if rapid.IntRange(0, 3).Draw(t, "limit") == 0 {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: rapid.Uint32().Draw(t, "requests_per_unit"),
				Unit:            typev3.RateLimitUnit(rapid.Int32().Draw(t, "unit")),
			}
			if rapid.Bool().Draw(t, "multiplier") {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(rapid.Uint32().Draw(t, "unit_multiplier"))
			}
		}
		if rapid.Bool().Draw(t, "descriptor hits") {
			d.HitsAddend = wrapperspb.UInt64(rapid.Uint64().Draw(t, "hits"))
		}
		d.IsNegativeHits = rapid.IntRange(0, 3).Draw(t, "negative") == 0
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestDecodeMatchesProtoRapid: every RateLimitRequest proto.Marshal
// writes, ours and protorand's (every field at random), DecodeRequest
// decodes as proto.Unmarshal does.
func TestDecodeMatchesProtoRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var req proto.Message
		if rapid.Bool().Draw(t, "protorand") {
			m := new(rlsv3.RateLimitRequest)
			protorand.Fill(t, m.ProtoReflect(), 4)
			req = m
		} else {
			req = randomRequest(t)
		}
		b, err := proto.MarshalOptions{Deterministic: rapid.Bool().Draw(t, "deterministic")}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		takes(t, b)
	})
}

// wireGen writes RateLimitRequests field by field, as no encoder would
// but proto.Unmarshal reads: fields in any order, repeated (a scalar's
// last wins, a message's merge), varints and lengths padded to more bytes
// than they need. With bad set, it also writes one field, at any depth,
// that DecodeRequest gives up on, and records that it did in wrote: one
// only, so that a decoder that skips it where it should give up is seen.
type wireGen struct {
	t          *rapid.T
	bad, wrote bool
}

func (g *wireGen) varint(v uint64) []byte {
	b := wire(nil).Varint(0, v)[1:]
	pad := rapid.IntRange(0, 10-len(b)).Draw(g.t, "pad")
	if rapid.IntRange(0, 3).Draw(g.t, "padded") != 0 || pad == 0 {
		return b
	}
	b[len(b)-1] |= 0x80
	for range pad - 1 {
		b = append(b, 0x80)
	}
	return append(b, 0)
}

// value is a varint drawn small or anywhere in 64 bits.
func (g *wireGen) value() uint64 {
	if rapid.Bool().Draw(g.t, "small") {
		return uint64(rapid.IntRange(0, 300).Draw(g.t, "v"))
	}
	return rapid.Uint64().Draw(g.t, "v")
}

func (g *wireGen) tag(num int, typ byte) []byte { return g.varint(uint64(num)<<3 | uint64(typ)) }

func (g *wireGen) bytesField(num int, payload []byte) []byte {
	b := append(g.tag(num, 2), g.varint(uint64(len(payload)))...)
	return append(b, payload...)
}

// message writes up to most fields of a message whose fields are kinds
// (as decode.go spells them), sub writing the payload of field num.
func (g *wireGen) message(kinds string, most int, sub func(num int) []byte) []byte {
	var b []byte
	for range rapid.IntRange(0, most).Draw(g.t, "fields") {
		if g.bad && !g.wrote && rapid.IntRange(0, 7).Draw(g.t, "bad") == 0 {
			b = append(b, g.badField(kinds)...)
			continue
		}
		num := rapid.IntRange(1, len(kinds)).Draw(g.t, "num")
		if kinds[num-1] == 'v' {
			b = append(append(b, g.tag(num, 0)...), g.varint(g.value())...)
		} else {
			b = append(b, g.bytesField(num, sub(num))...)
		}
	}
	return b
}

// badField is a field DecodeRequest gives up on: a number the message
// does not have (of any wire type, a group too), a wire type its field
// does not have, invalid UTF-8, or a byte of garbage.
func (g *wireGen) badField(kinds string) []byte {
	g.wrote = true
	num := rapid.IntRange(1, len(kinds)).Draw(g.t, "bad num")
	switch rapid.IntRange(0, 4).Draw(g.t, "bad kind") {
	case 0:
		num = rapid.OneOf(rapid.IntRange(len(kinds)+1, 20), rapid.IntRange(1<<28, 1<<29-1)).Draw(g.t, "unknown")
		fallthrough
	case 1:
		switch typ := byte(rapid.IntRange(0, 5).Draw(g.t, "wire type")); typ {
		case 0:
			return append(g.tag(num, typ), g.varint(g.value())...)
		case 1:
			return append(g.tag(num, typ), 1, 2, 3, 4, 5, 6, 7, 8)
		case 5:
			return append(g.tag(num, typ), 1, 2, 3, 4)
		case 3:
			return append(append(g.tag(num, 3), g.tag(1, 0)...), append(g.varint(7), g.tag(num, 4)...)...)
		default:
			return g.bytesField(num, []byte(randomString.Draw(g.t, "unknown bytes")))
		}
	case 2:
		return g.bytesField(num, []byte("a\xffb"))
	case 3:
		return append(g.tag(num, 2), g.varint(1000)...) // longer than what is left
	default:
		return []byte{rapid.Byte().Draw(g.t, "garbage")}
	}
}

func (g *wireGen) request() []byte {
	return g.message(requestFields, 24, func(num int) []byte {
		if num == 1 {
			return []byte(randomString.Draw(g.t, "domain"))
		}
		return g.descriptor()
	})
}

func (g *wireGen) descriptor() []byte {
	return g.message(descriptorFields, 8, func(num int) []byte {
		switch num {
		case 1:
			return g.message(entryFields, 4, func(int) []byte { return []byte(randomString.Draw(g.t, "string")) })
		case 2:
			return g.message(overrideFields, 5, func(int) []byte { return g.wrapper() })
		}
		return g.wrapper()
	})
}

func (g *wireGen) wrapper() []byte { return g.message(wrapperFields, 3, nil) }

// TestDecodeWireRapid: requests written as proto.Unmarshal reads them, in
// any order, repeated, padded: DecodeRequest decodes each as proto does;
// with fields it does not decode among them, it gives up or agrees.
func TestDecodeWireRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := &wireGen{t: t, bad: rapid.Bool().Draw(t, "bad")}
		b := g.request()
		if took := agrees(t, b); !took && !g.wrote {
			t.Fatalf("%x: DecodeRequest gave up on a request of the fields it decodes", b)
		}
	})
}

// TestDecodeMutationsRapid: valid encodings with bytes changed, inserted
// or cut, or several concatenated (one message to proto, merged):
// DecodeRequest gives up or agrees with proto.Unmarshal, and never panics.
func TestDecodeMutationsRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b []byte
		for range rapid.IntRange(1, 3).Draw(t, "parts") {
			part, err := proto.Marshal(randomRequest(t))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, part...)
		}
		mutations := rapid.IntRange(0, 3).Draw(t, "mutations")
		for range mutations {
			b = protorand.Mutate(t, b)
		}
		if took := agrees(t, b); !took && mutations == 0 {
			t.Fatalf("%x: DecodeRequest gave up on concatenated requests", b)
		}
	})
}

// TestDecodeCases: what DecodeRequest takes, merges and gives up on.
func TestDecodeCases(t *testing.T) {
	entry := wiretest.Entry
	d := wiretest.Descriptor
	rls := wiretest.RateLimitRequest
	full, err := proto.Marshal(wiretest.FullRateLimitRequest())
	if err != nil {
		t.Fatal(err)
	}
	limit := wire{}.Varint(1, 10).Varint(2, 3).Msg(3, wire{}.Varint(1, 2))
	tests := []struct {
		name string
		b    wire
		take bool
	}{
		{"empty", nil, true},
		{"every field", full, true},
		{"ordinary", rls("edge", 0, d("user", "alice"), d("user2", "ü")), true},
		{"empty descriptors and entries", rls("", 0, d(), wire{}.Msg(1, nil)), true},
		{"fields out of order", wire{}.Varint(3, 4).Msg(2, d("k", "v")).Str(1, "edge"), true},
		{"domain twice: the last wins", wire{}.Str(1, "a").Msg(2, d("k", "v")).Str(1, "b"), true},
		{"hits_addend above 32 bits: truncated", wire{}.Varint(3, 1<<40+5), true},
		{"entry key twice, entries around a limit", rls("e", 0, wire{}.Msg(1, entry("k", "v").Str(1, "k2")).Msg(2, limit).Msg(1, entry("a", "b"))), true},
		{"limit twice: merged", rls("e", 0, wire{}.Msg(2, limit).Msg(2, wire{}.Varint(2, 5).Msg(3, nil))), true},
		{"hits_addend twice: merged", rls("e", 0, wire{}.Msg(3, wire{}.Varint(1, 8)).Msg(3, nil).Varint(4, 2)), true},
		{"unit above 32 bits, negative", rls("e", 0, wire{}.Msg(2, wire{}.Varint(2, 1<<63|3))), true},
		{"unknown request field", rls("e", 0, d("k", "v")).Varint(4, 1), false},
		{"unknown entry field", rls("e", 0, wire{}.Msg(1, entry("k", "v").Varint(3, 1))), false},
		{"unknown fields between known ones", wire{}.Str(1, "e").Str(7, "x").Msg(2, wire{}.Varint(5, 1).Msg(1, entry("k", "v"))), false},
		{"domain as a varint", wire{}.Varint(1, 1), false},
		{"hits_addend as bytes", wire{}.Str(3, "x"), false},
		{"invalid UTF-8 in a value", rls("e", 0, d("k", "\xff")), false},
		{"invalid UTF-8 in the domain", rls("\xc0\xaf", 0), false},
		{"a group", wire{0x23, 0x24}, false},
		{"cut short", full[:len(full)-1], false},
		{"field number 0", wire{0x02, 0x00}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if took := agrees(t, tc.b); took != tc.take {
				t.Fatalf("took it: %v, want %v", took, tc.take)
			}
		})
	}
}

// TestDecodeShares: a request's descriptors, entries and strings are each
// one array, and appending to a descriptor's entries leaves the next
// descriptor's alone.
func TestDecodeShares(t *testing.T) {
	b := wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("a", "1", "b", "2"), wiretest.Descriptor("c", "3"))
	req := new(rlsv3.RateLimitRequest)
	if !DecodeRequest(b, req) {
		t.Fatal("gave up")
	}
	d0, d1 := req.Descriptors[0], req.Descriptors[1]
	d0.Entries = append(d0.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "x"})
	if d1.Entries[0].Key != "c" {
		t.Fatalf("appending to the first descriptor's entries changed the second's: %v", d1)
	}
	b[len(b)-1] = 'X' // the input is gRPC's, reused once decoded
	if d1.Entries[0].Value != "3" || !bytes.Equal([]byte(req.Domain), []byte("edge")) {
		t.Fatalf("the strings alias the input: %v", req)
	}
}

// TestDecodeAllocs: a request of 8 descriptors, one entry each, costs 5
// allocations (descriptors, their pointers, entries, their pointers, the
// strings), as one of 1 does; proto.Unmarshal's grow with the request.
func TestDecodeAllocs(t *testing.T) {
	for _, n := range []int{1, 8} {
		b := benchRequest(n)
		req := new(rlsv3.RateLimitRequest)
		if got := testing.AllocsPerRun(100, func() { DecodeRequest(b, req) }); got != 5 {
			t.Errorf("%d descriptors: %v allocations, want 5", n, got)
		}
	}
}

// benchRequest is the shared benchmark's request: domain bench, n
// descriptors {user: value}, {user2: value}, ….
func benchRequest(n int) wire {
	ds := make([]wire, n)
	for i := range ds {
		k := "user"
		if i > 0 {
			k += string(rune('1' + i))
		}
		ds[i] = wiretest.Descriptor(k, "k4711")
	}
	return wiretest.RateLimitRequest("bench", 0, ds...)
}

// BenchmarkDecodeRequest: the shared benchmark's request (benchRequest)
// of 1 and 8 descriptors into a new message, as gRPC decodes each.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, n := range []int{1, 8} {
		data := benchRequest(n)
		b.Run(fmt.Sprintf("codec=proto/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(data, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("codec=rlswire/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !DecodeRequest(data, new(rlsv3.RateLimitRequest)) {
					b.Fatal("gave up")
				}
			}
		})
	}
}
