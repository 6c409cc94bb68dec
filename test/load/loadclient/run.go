package main

// A run starts c.Workers goroutines spread over c.Conns gRPC connections.
// Each sends one ShouldRateLimit at a time, from before the warmup until
// its first call that completes after the window [start, end) closes. A
// call counts if it completes inside the window, whatever its outcome;
// calls that complete after it (cut by the end of the run, among them
// every call in flight when the run cancels its context) are counted as
// cut, not as errors. Workers write only their own counters and
// histogram; the run reads them after every worker has returned.

import (
	"context"
	"fmt"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// numCodes is the number of gRPC status codes (OK … Unauthenticated); an
// error with a code outside them is counted under the last one.
const numCodes = int(codes.Unauthenticated) + 1

// counts is what one worker saw in the window.
type counts struct {
	ok, overLimit uint64
	// badCode counts answers whose overall code is neither OK nor
	// OVER_LIMIT (UNKNOWN): errors of the server, not of gRPC.
	badCode uint64
	byCode  [numCodes]uint64 // failed calls by gRPC status code
	cut     uint64
	latency histogram
}

// result is a run's outcome; report formats it.
type result struct {
	Name      string
	Window    time.Duration // measured time, from start to end as the clock saw them
	Reqs      uint64        // calls completed inside the window: OK + OverLimit + Errors
	OK        uint64
	OverLimit uint64
	Errors    uint64
	ByCode    map[string]uint64 // Errors by gRPC code name, plus "BadOverallCode"
	Cut       uint64            // calls completed after the window; not in Reqs
	Latency   histogram
	ClientCPU time.Duration   // this process's CPU time over the window
	ProcCPU   []time.Duration // CPU time of each of config.Pids over the window
	Config    config
}

// run sends load as c says and returns what it measured. It returns when
// every worker has stopped, at most c.Grace after warmup + duration; if
// workers are still in a call then, it returns an error. Cancelling ctx
// ends the run early with ctx's error.
func run(ctx context.Context, c config) (*result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	reqs := buildRequests(c)
	clients := make([]rlsv3.RateLimitServiceClient, c.Conns)
	for i := range clients {
		// One ClientConn is one HTTP/2 connection; passthrough hands the
		// checked address to the dialer as it is.
		cc, err := grpc.NewClient("passthrough:///"+c.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connection %d to %s: %w", i, c.Addr, err)
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}

	if err := probe(ctx, clients, reqs[0], c.Grace); err != nil {
		return nil, err
	}

	var interval time.Duration
	if c.Rate > 0 {
		interval = time.Duration(float64(c.Workers) / c.Rate * float64(time.Second))
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	start := begin.Add(c.Warmup)
	end := start.Add(c.Duration)
	workers := make([]worker, c.Workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		*w = worker{
			client: clients[i%len(clients)], reqs: reqs,
			pick: newPicker(len(reqs), i, c.Workers, c.Sequential),
			// Paced workers start spread over one interval, not at once.
			next:     begin.Add(interval * time.Duration(i) / time.Duration(c.Workers)),
			interval: interval, start: start, end: end,
		}
		wg.Go(func() { w.run(callCtx) })
	}

	var cpu cpuSample
	cpu0, err := sampleCPU(ctx, c.Pids, start)
	if err == nil {
		var cpu1 cpuSample
		if cpu1, err = sampleCPU(ctx, c.Pids, end); err == nil {
			cpu = cpu1.sub(cpu0)
		}
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.Grace):
		return nil, fmt.Errorf("%d workers: still in a call %v after the run ended", c.Workers, c.Grace)
	}
	if err != nil {
		return nil, err
	}
	return collect(c, workers, end.Sub(start), cpu), nil
}

// probe makes one call on each connection, waiting up to timeout for the
// server, so that a run against nothing fails at once with the reason
// instead of counting a window of Unavailable, and the window starts
// with every connection up.
func probe(ctx context.Context, clients []rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for i, cl := range clients {
		if _, err := cl.ShouldRateLimit(ctx, req, grpc.WaitForReady(true)); err != nil {
			return fmt.Errorf("first call on connection %d: %w", i, err)
		}
	}
	return nil
}

// worker is one closed-loop (or, with an interval, paced) sender.
type worker struct {
	client   rlsv3.RateLimitServiceClient
	reqs     []*rlsv3.RateLimitRequest
	pick     *picker
	next     time.Time     // when a paced worker sends next
	interval time.Duration // between a paced worker's sends; 0 is a closed loop
	start    time.Time     // the window
	end      time.Time
	counts
}

// run calls until a call completes at or after w.end, or, paced, until
// the next send would be at or after it.
func (w *worker) run(ctx context.Context) {
	var timer *time.Timer
	if w.interval > 0 {
		timer = time.NewTimer(time.Hour)
		defer timer.Stop()
	}
	for {
		if w.interval > 0 {
			if !w.next.Before(w.end) {
				return
			}
			// Go's timers wake about 1 ms late on Linux, so sends come in
			// small bursts that catch up; the rate holds on average.
			if d := time.Until(w.next); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
			w.next = w.next.Add(w.interval)
		}
		req := w.reqs[w.pick.pick()]
		t0 := time.Now()
		resp, err := w.client.ShouldRateLimit(ctx, req)
		t1 := time.Now()
		switch {
		case !t1.Before(w.end):
			w.cut++
			return
		case t1.Before(w.start):
			if err != nil && ctx.Err() != nil {
				return
			}
			continue
		}
		// Latency is from the actual send, not the scheduled one: the
		// pacing timer's lateness is the client's, not the server's.
		w.latency.record(t1.Sub(t0))
		switch {
		case err != nil:
			w.byCode[min(int(status.Code(err)), numCodes-1)]++
			if ctx.Err() != nil {
				return
			}
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			w.ok++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			w.overLimit++
		default:
			w.badCode++
		}
	}
}

// collect merges the workers' counts into a result.
func collect(c config, workers []worker, window time.Duration, cpu cpuSample) *result {
	r := &result{Name: c.Name, Window: window, ByCode: map[string]uint64{}, Config: c,
		ClientCPU: cpu.self, ProcCPU: cpu.procs}
	for i := range workers {
		w := &workers[i].counts
		r.OK += w.ok
		r.OverLimit += w.overLimit
		r.Cut += w.cut
		r.Latency.merge(&w.latency)
		if w.badCode > 0 {
			r.ByCode["BadOverallCode"] += w.badCode
			r.Errors += w.badCode
		}
		for code, n := range w.byCode {
			if n > 0 {
				r.ByCode[codes.Code(code).String()] += n
				r.Errors += n
			}
		}
	}
	r.Reqs = r.OK + r.OverLimit + r.Errors
	return r
}

// cpuSample is the CPU time of this process and of the watched ones at
// one instant, or, from sub, over an interval.
type cpuSample struct {
	self  time.Duration
	procs []time.Duration
}

// sampleCPU waits until at, then reads the CPU times.
func sampleCPU(ctx context.Context, ps []proc, at time.Time) (cpuSample, error) {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return cpuSample{}, ctx.Err()
	}
	s := cpuSample{self: selfCPU(), procs: make([]time.Duration, len(ps))}
	for i, p := range ps {
		d, err := procCPU(p.PID)
		if err != nil {
			return cpuSample{}, fmt.Errorf("-pids %s=%d: %w", p.Name, p.PID, err)
		}
		s.procs[i] = d
	}
	return s, nil
}

// sub returns the CPU time used from earlier to s.
func (s cpuSample) sub(earlier cpuSample) cpuSample {
	d := cpuSample{self: s.self - earlier.self, procs: make([]time.Duration, len(s.procs))}
	for i := range s.procs {
		d.procs[i] = s.procs[i] - earlier.procs[i]
	}
	return d
}
