package redis

// Batching: the calls of concurrent requests go to Redis together, as one
// FCALL that runs each request's call in turn (lua/ops.lua, batchop).
//
// A Redis function call has a fixed cost (the call, its argument tables,
// its reply) that is a large part of a one-bucket decision's; under load a
// replica has many requests in flight at once, and each paid it. Now at
// most MaxInFlight calls of one Store are in flight (within their
// requests' deadlines): a request that finds
// a free place is sent at once, alone (no delay when the replica is not
// busy); the others queue, and when a call returns, the queue goes as the
// next call, up to MaxItems buckets. Each request is still decided on its
// own, all or nothing, at its own instant, exactly as alone: a batch only
// shares the call. One request's script error fails that request only
// (the script runs each under pcall).
//
// A queued request whose context ends before its batch is sent leaves the
// queue with nothing decided; one whose context ends once sent is
// ambiguous (it may yet be charged), and its call goes on for lateWait
// past the latest deadline of its batch so that its answer can settle the
// question (ambiguous.go). No request's cancellation cancels a call.
//
// On a Cluster each master node has its batcher (nodes.go): a batch
// holds calls whose keys live on one node, and when they span slots it
// goes as a node call (contract.go), its calls ordered by slot.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// errQueued: a request's context ended while it waited for a batch; it
// was never sent, so nothing was decided.
var errQueued = errors.New("not sent: queued behind the calls in flight")

// errLate: a request's context ended while its call was out; the call
// may yet be decided (ambiguous.go).
var errLate = errors.New("sent, not answered in time")

// BatchOptions tune batching; zero fields take the defaults in brackets
// (MaxInFlight, which can turn batching off, as Options says).
type BatchOptions struct {
	// MaxInFlight is the most calls of this Store in flight at once [nil:
	// 2], on a Cluster shared out among the masters, at least one each
	// (perMaster); 0 turns batching off (every request its own call).
	MaxInFlight *int
	// MaxItems is the most buckets in one batch [128]: a batch holds Redis
	// for its buckets' time (a few µs each), during which other replicas'
	// calls wait.
	MaxItems int
}

// batcher queues requests' calls while MaxInFlight calls are out.
type batcher struct {
	s                     *Store
	client                rueidis.Client // its Cluster node's own, or nil (callOn)
	maxInFlight, maxItems int
	mu                    sync.Mutex
	inFlight              int
	queue                 []*queued
}

// queued is one request's call, queued or in a batch.
type queued struct {
	keys, args []string
	compact    *compactCall // when set, the call (args unused)
	deadline   time.Time
	done       chan struct{}
	reply      []rueidis.RedisMessage
	packed     string // a packed reply (contract.go), when reply is nil
	err        error
	taken      bool // in a batch (under batcher.mu)
	multi      bool // its keys are of several slots of one Cluster node
}

func newBatcher(s *Store, o BatchOptions) *batcher {
	b := &batcher{s: s, maxInFlight: 2, maxItems: 128}
	if o.MaxInFlight != nil {
		b.maxInFlight = *o.MaxInFlight
	}
	if o.MaxItems > 0 {
		b.maxItems = o.MaxItems
	}
	if b.maxInFlight == 0 {
		return nil
	}
	return b
}

// do runs one request's call, in a batch when others are in flight. A
// call is always sent by a goroutine of its own (send), so that a request
// whose context ends returns then, while its call may still be answered:
// on errLate the call is out and queued.done closes when its answer (or
// the end of the wait for it) is in.
func (b *batcher) do(ctx context.Context, keys, args []string, c *compactCall) (*queued, error) {
	return b.wait(ctx, b.submit(ctx, keys, args, c))
}

// submit sends a call, or queues it while MaxInFlight calls are out; wait
// waits for it.
func (b *batcher) submit(ctx context.Context, keys, args []string, c *compactCall) *queued {
	dl, _ := ctx.Deadline()
	w := &queued{keys: keys, args: args, compact: c, deadline: dl, done: make(chan struct{}), multi: b.s.cluster && multiSlot(keys)}
	b.mu.Lock()
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		w.taken = true
		b.mu.Unlock()
		go b.send([]*queued{w})
	} else {
		b.queue = append(b.queue, w)
		b.mu.Unlock()
	}
	return w
}

// wait waits for the answer of a submitted call within ctx (do says how).
func (b *batcher) wait(ctx context.Context, w *queued) (*queued, error) {
	select {
	case <-w.done:
		return w, w.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !w.taken {
		for i, q := range b.queue {
			if q == w {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		return nil, fmt.Errorf("%w: %w", errQueued, ctx.Err())
	}
	// An answer in by now is the answer: its request waited for a CPU
	// past its deadline (select picks either case when both are ready),
	// and Redis decided it.
	select {
	case <-w.done:
		return w, w.err
	default:
	}
	return w, fmt.Errorf("%w: %w", errLate, ctx.Err())
}

// next sends the queue, if any, as the next call, else frees the place
// of the call that just returned.
func (b *batcher) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inFlight--
		return
	}
	batch := b.take()
	go b.send(batch)
}

// take removes the batch from the front of the queue (under mu): at least
// one call, at most MaxItems buckets. A call of several slots must be
// fresh in its batch (no earlier call has one of its keys), as it cannot
// read its records again itself (a command is of one slot): it waits for
// the next batch otherwise.
func (b *batcher) take() []*queued {
	n, items := 0, 0
	for n < len(b.queue) {
		w := b.queue[n]
		if n > 0 && (items+len(w.keys) > b.maxItems || w.multi && sharesKey(b.queue[:n], w)) {
			break
		}
		items += len(w.keys)
		n++
	}
	batch := make([]*queued, n)
	copy(batch, b.queue)
	for _, w := range batch {
		w.taken = true
	}
	b.queue = append(b.queue[:0], b.queue[n:]...)
	return batch
}

// send runs a batch's calls as one and hands each its reply.
func (b *batcher) send(batch []*queued) {
	var dl time.Time
	for _, w := range batch {
		if w.deadline.After(dl) {
			dl = w.deadline
		}
	}
	if dl.IsZero() {
		dl = time.Now().Add(b.s.opts.Timeout)
	}
	// The call's place in flight is freed when it returns or, if sooner,
	// at its requests' deadline: the queue goes on, and new calls tell the
	// breaker whether Redis answers, while this one waits lateWait more
	// for an answer that says whether it charged (ambiguous.go).
	var once sync.Once
	free := func() { once.Do(b.next) }
	late := time.AfterFunc(time.Until(dl), free)
	defer func() {
		late.Stop()
		free()
	}()
	ctx, cancel := context.WithDeadline(context.Background(), dl.Add(lateWait))
	defer cancel()
	if len(batch) == 1 && batch[0].compact == nil && !batch[0].multi {
		w := batch[0]
		w.reply, w.err = b.s.callOn(ctx, b.client, w.keys, w.args)
		close(w.done)
		return
	}
	if len(batch) > 1 {
		b.s.metrics.batches.Inc()
		b.s.metrics.batched.Add(float64(len(batch)))
	}
	b.s.callBatchOn(ctx, b.client, batch)
	for _, w := range batch {
		close(w.done)
	}
}

// callBatch runs batch's calls as one and gives each its reply or error.
// On a Cluster a failed batch may have been grouped by a stale map of
// the nodes, which is then read again.
func (s *Store) callBatch(ctx context.Context, batch []*queued) { s.callBatchOn(ctx, nil, batch) }

// callBatchOn is callBatch through node client c (callOn).
func (s *Store) callBatchOn(ctx context.Context, c rueidis.Client, batch []*queued) {
	layout := batchArgs
	if s.cluster && spansSlots(batch) {
		layout = nodeCall
	}
	keys, args := layout(batch)
	msgs, err := s.callOn(ctx, c, keys, args)
	if err != nil && s.nodes != nil {
		s.nodes.stale()
	}
	if err == nil && len(msgs) != len(batch) {
		err = fmt.Errorf("redis: batch of %d calls answered %d replies", len(batch), len(msgs))
	}
	for i, w := range batch {
		if err != nil {
			w.err = err
			continue
		}
		// A call's error reply (its own, caught by the script) fails that
		// call only.
		if msgs[i].IsString() {
			w.packed, w.err = msgs[i].ToString()
		} else if w.reply, w.err = msgs[i].ToArray(); w.err != nil {
			w.err = fmt.Errorf("redis: %w", w.err)
		}
	}
}

// sharing reports, for each call of a batch (nk keys in all), whether no
// earlier call has one of its keys (fresh) and whether a later one does
// (held). Within one call a repeated key is neither.
func sharing(batch []*queued, nk int) (fresh, held []bool) {
	fresh, held = make([]bool, len(batch)), make([]bool, len(batch))
	if len(batch) == 1 {
		fresh[0] = true
		return fresh, held
	}
	last := make(map[string]int, nk) // a key's latest call
	for i, w := range batch {
		fresh[i] = true
		for _, k := range w.keys {
			if j, ok := last[k]; ok && j < i {
				fresh[i], held[j] = false, true
			}
			last[k] = i
		}
	}
	return fresh, held
}

// batchArgs lays out a batch's calls as one (contract.go: batch
// arguments): their keys concatenated, and after the batch header, the
// compact calls' contexts and versions, each call's key and argument
// counts, and each call's arguments.
func batchArgs(batch []*queued) (keys, args []string) {
	var t batchTables
	packed := make([]string, len(batch))
	nk, na := 0, 0
	for i, w := range batch {
		nk += len(w.keys)
		if w.compact != nil {
			packed[i] = w.compact.pack(&t)
			na++
		} else {
			na += len(w.args)
		}
	}
	keys = make([]string, 0, nk)
	args = make([]string, 0, batchHead+headerArgs*len(t.stores)+itemArgs*len(t.versions)+1+na)
	args = append(args, opBatch, strconv.Itoa(len(batch)), strconv.Itoa(len(t.stores)), strconv.Itoa(len(t.versions)))
	args = t.appendTables(args)
	fresh, held := sharing(batch, nk)
	counts := make([]byte, 0, 16*len(batch))
	for i, w := range batch {
		keys = append(keys, w.keys...)
		n, k := len(w.args), len(w.keys)
		if w.compact != nil {
			n = 1
			if held[i] {
				n = -1
			}
		}
		if !fresh[i] {
			k = -k
		}
		counts = appendDoubles(counts, float64(k), float64(n))
	}
	args = append(args, string(counts))
	for i, w := range batch {
		if w.compact != nil {
			args = append(args, packed[i])
		} else {
			args = append(args, w.args...)
		}
	}
	return keys, args
}

// spansSlots reports whether a batch's keys are of several slots.
func spansSlots(batch []*queued) bool {
	sl := keySlot(batch[0].keys[0])
	for _, w := range batch {
		if w.multi || keySlot(w.keys[0]) != sl {
			return true
		}
	}
	return false
}

// multiSlot reports whether keys are of several slots.
func multiSlot(keys []string) bool {
	for _, k := range keys[1:] {
		if keySlot(k) != keySlot(keys[0]) {
			return true
		}
	}
	return false
}

// sharesKey reports whether one of w's keys is one of earlier calls'.
func sharesKey(earlier []*queued, w *queued) bool {
	for _, e := range earlier {
		for _, k := range e.keys {
			if slices.Contains(w.keys, k) {
				return true
			}
		}
	}
	return false
}

// nodeCall lays out a batch whose keys are of several slots of one node
// as a node call (contract.go): each run of its keys of one slot in a row
// is read by one MGET; the routing key is the batch's first.
func nodeCall(batch []*queued) (keys, args []string) {
	keys, bargs := batchArgs(batch)
	var runs []string
	for i := 0; i < len(keys); {
		j, sl := i+1, keySlot(keys[i])
		for j < len(keys) && keySlot(keys[j]) == sl {
			j++
		}
		runs = append(runs, strconv.Itoa(j-i))
		i = j
	}
	args = make([]string, 0, nodeHead+len(runs)+len(keys)+len(bargs))
	args = append(args, opNode, strconv.Itoa(len(runs)))
	args = append(append(append(args, runs...), keys...), bargs...)
	return keys[:1], args
}
