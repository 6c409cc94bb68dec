package server

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tokengate/tokengate/pkg/service"
)

// Decode bounds. A request message is read whole before it is decoded,
// and decoding it costs more memory than its bytes: a RateLimitRequest of
// empty descriptors is two bytes on the wire for each descriptor and
// about a hundred on the heap, so one 1 MiB message decodes to tens of MB,
// and sixteen at once took 800-900 MB. Three bounds keep that small:
//
//   - the largest message accepted (Options.GRPCMaxRecvBytes, 1 MiB by
//     default): gRPC refuses a larger one with RESOURCE_EXHAUSTED before
//     reading it. It stays well above what Envoy can send: a client
//     shapes a request through its headers (up to Envoy's 60 KiB, copied
//     into each descriptor that reads them), and a request refused with
//     an error is one that failure_mode_deny: false lets through;
//   - a RateLimitRequest above gateFrom bytes is counted on the wire
//     before it is decoded (checkShape): more descriptors, or entries in
//     one, than the service accepts is refused undecoded;
//   - a decodeGate, through which messages above gateFrom bytes decode,
//     at most decodeBudget bytes of them at once; smaller ones (every
//     ordinary request) pass untouched.
const (
	defaultMaxRecvBytes = 1 << 20
	gateFrom            = 16 << 10
	decodeBudget        = 1 << 20
	gateChunk           = 16 << 10
)

// decodeGate bounds the bytes of large messages being decoded at once.
// It is safe for concurrent use.
type decodeGate struct {
	mu     sync.Mutex    // one acquirer at a time, so that none holds part of its share while waiting
	chunks chan struct{} // a token per gateChunk bytes of the budget
}

func newDecodeGate() *decodeGate {
	return &decodeGate{chunks: make(chan struct{}, decodeBudget/gateChunk)}
}

// enter waits until a message of n bytes (above gateFrom) may decode, and
// returns how to leave; a message larger than the budget decodes alone.
func (g *decodeGate) enter(n int) (leave func()) {
	k := min((n+gateChunk-1)/gateChunk, cap(g.chunks))
	g.mu.Lock()
	for range k {
		g.chunks <- struct{}{}
	}
	g.mu.Unlock()
	return func() {
		for range k {
			<-g.chunks
		}
	}
}

// checkShape counts a RateLimitRequest's descriptors (field 2), and each
// one's entries (field 1), on the wire, and refuses more than the service
// decides (service.MaxDescriptors, service.MaxEntries) before anything is
// decoded. Malformed data is left to the decoder, which refuses it.
func checkShape(b []byte) error {
	descriptors := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			if descriptors++; descriptors > service.MaxDescriptors {
				return fmt.Errorf("ratelimit request: more than %d descriptors", service.MaxDescriptors)
			}
			d, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			if err := checkEntries(d, descriptors); err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return nil
}

// checkEntries counts the entries (field 1) of descriptor i.
func checkEntries(d []byte, i int) error {
	entries := 0
	for len(d) > 0 {
		num, typ, n := protowire.ConsumeTag(d)
		if n < 0 {
			return nil
		}
		if num == 1 {
			if entries++; entries > service.MaxEntries {
				return fmt.Errorf("ratelimit request: descriptor %d: more than %d entries", i, service.MaxEntries)
			}
		}
		m := protowire.ConsumeFieldValue(num, typ, d[n:])
		if m < 0 {
			return nil
		}
		d = d[n+m:]
	}
	return nil
}
