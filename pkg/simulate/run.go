package simulate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tokengate/tokengate/pkg/policy"
)

// Trace is a trace to replay: its name, for errors, and how to open it.
// Run opens it once, or twice when it follows the hottest buckets.
type Trace struct {
	Name string
	Open func() (io.ReadCloser, error)
}

// FileTrace is the trace in the file at path.
func FileTrace(path string) Trace {
	return Trace{Name: path, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}

// BytesTrace is a trace held in memory.
func BytesTrace(name string, data []byte) Trace {
	return Trace{Name: name, Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// RunOptions configure Run.
type RunOptions struct {
	// MaxBuckets caps each policy's memory store (Options.MaxBuckets).
	MaxBuckets int
	// Hot is how many of each policy's hottest buckets (most decisions)
	// to follow into Result.Buckets. Finding them takes a first run, so
	// with Hot > 0 the trace is replayed twice; 0 replays it once.
	Hot int
}

// Run replays the trace through each policy, each on buckets and a clock
// of its own, request by request in step, and returns one Result per
// policy, in order. A bad line of the trace stops it with an error naming
// the line.
func Run(ctx context.Context, tr Trace, pols []*policy.Policy, opts RunOptions) ([]*Result, error) {
	sims, err := replay(ctx, tr, pols, func(int) Options {
		return Options{MaxBuckets: opts.MaxBuckets, CountBuckets: opts.Hot > 0}
	})
	if err != nil {
		return nil, err
	}
	results := make([]*Result, len(sims))
	for i, s := range sims {
		results[i] = s.Result()
	}
	if opts.Hot <= 0 {
		return results, nil
	}
	// The second run decides exactly as the first: the same trace through
	// the same policy on fresh buckets, with no randomness below the cap.
	followed, err := replay(ctx, tr, pols, func(i int) Options {
		return Options{MaxBuckets: opts.MaxBuckets, Follow: sims[i].Hottest(opts.Hot)}
	})
	if err != nil {
		return nil, err
	}
	for i, s := range followed {
		results[i].Buckets = s.Result().Buckets
	}
	return results, nil
}

// replay runs the trace once through a new Simulator per policy.
func replay(ctx context.Context, tr Trace, pols []*policy.Policy, opts func(int) Options) ([]*Simulator, error) {
	sims := make([]*Simulator, len(pols))
	for i, p := range pols {
		var err error
		if sims[i], err = New(p, opts(i)); err != nil {
			return nil, err
		}
	}
	f, err := tr.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := NewReader(tr.Name, f)
	var req Request
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := rd.Read(&req); errors.Is(err, io.EOF) {
			return sims, nil
		} else if err != nil {
			return nil, err
		}
		for _, s := range sims {
			if err := s.Decide(ctx, &req); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", tr.Name, req.Line, err)
			}
		}
	}
}
