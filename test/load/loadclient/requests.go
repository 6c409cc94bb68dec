package main

import (
	"math/rand/v2"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// keyValue is the descriptor value of key number i: "u0", "u1", …, as the
// ghz runs of test/load sent them.
func keyValue(i int) string { return "u" + strconv.Itoa(i) }

// buildRequests returns one request per key value, built before the run so
// that a worker only picks one. Request i asks for c.Descs descriptors
// {c.Key: value}, with the values of keys i, i+1, … (modulo the number of
// keys), so that each descriptor is its own bucket where the keys allow;
// with -hot there is one request, every descriptor "hot". Requests share
// their descriptors and are never written after this: gRPC marshals them
// from many goroutines at once, which protobuf allows.
func buildRequests(c config) []*rlsv3.RateLimitRequest {
	n := c.Keys
	if c.Hot {
		n = 1
	}
	descs := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range descs {
		v := hotValue
		if !c.Hot {
			v = keyValue(i)
		}
		descs[i] = &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: c.Key, Value: v}},
		}
	}
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		d := make([]*ratelimitv3.RateLimitDescriptor, c.Descs)
		for j := range d {
			d[j] = descs[(i+j)%n]
		}
		reqs[i] = &rlsv3.RateLimitRequest{Domain: c.Domain, Descriptors: d, HitsAddend: c.Hits}
	}
	return reqs
}

// picker chooses the next request of one worker: uniformly at random, or
// in order from a start that differs per worker. Not safe for concurrent
// use; each worker has its own.
type picker struct {
	n, next    int
	sequential bool
	rng        *rand.Rand
}

// newPicker returns worker w's picker over n requests. Seeds are fixed per
// worker, so that two runs send the same key sequence.
func newPicker(n, w, workers int, sequential bool) *picker {
	return &picker{
		n:          n,
		next:       int(int64(n) * int64(w) / int64(workers)),
		sequential: sequential,
		rng:        rand.New(rand.NewPCG(uint64(w), 0x9e3779b97f4a7c15)),
	}
}

func (p *picker) pick() int {
	if p.n == 1 {
		return 0
	}
	if !p.sequential {
		return p.rng.IntN(p.n)
	}
	i := p.next
	p.next++
	if p.next == p.n {
		p.next = 0
	}
	return i
}
