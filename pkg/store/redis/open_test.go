package redis

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// countingClient is a client that counts its Close calls.
type countingClient struct {
	rueidis.Client
	closes *atomic.Int32
}

func (c countingClient) Close() {
	c.closes.Add(1)
	c.Client.Close()
}

// opening is an Open whose dials fail until the test lets one through,
// and which counts the clients dialled and their Close calls.
type opening struct {
	t              *testing.T
	srv            *redistest.Server
	dialed, closes atomic.Int32
	// connect is told of each dial that will succeed, with Open's context,
	// before it dials; nil: every dial fails.
	connect atomic.Pointer[func(ctx context.Context)]
}

var errDown = errors.New("down")

func (o *opening) dial(ctx context.Context, cfg redisconn.Config) (rueidis.Client, error) {
	f := o.connect.Load()
	if f == nil {
		return nil, errDown
	}
	(*f)(ctx)
	c, err := redisconn.Dial(cfg)
	if err != nil {
		return nil, err
	}
	o.dialed.Add(1)
	return countingClient{c, &o.closes}, nil
}

// open opens a Lazy on o.srv, with a candidate, retrying every
// millisecond.
func (o *opening) open() *Lazy {
	o.t.Helper()
	l, err := open(context.Background(), OpenOptions{
		Conn:      redisconn.Config{Addr: o.srv.Addr()},
		Store:     Options{Timeout: testTimeout, Logger: slog.New(slog.DiscardHandler)},
		Candidate: true,
	}, o.dial, time.Millisecond)
	if err != nil {
		o.t.Fatal(err)
	}
	return l
}

// wantClosed checks that l serves nothing, and that every client dialled
// was closed exactly once.
func (o *opening) wantClosed(l *Lazy) {
	o.t.Helper()
	v := storetest.Version(o.t, 1, 10, "1/s")
	req := &store.Request{Items: []store.Item{{Key: "k", Version: v, Cost: 1}}}
	for name, s := range map[string]store.Store{"store": l, "candidate": l.Candidate()} {
		if _, err := s.Decide(context.Background(), req, make([]store.Result, 1)); !errors.Is(err, store.ErrUnavailable) {
			o.t.Errorf("%s after Close: %v, want ErrUnavailable", name, err)
		}
	}
	if err := l.Health(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		o.t.Errorf("Health after Close: %v, want ErrUnavailable", err)
	}
	if d, c := o.dialed.Load(), o.closes.Load(); c != d {
		o.t.Errorf("%d clients dialled, %d Close calls", d, c)
	}
}

// TestLazyClose: Close while a connect is under way, or after one, or in
// a race with one that succeeds, closes every client exactly once, and
// afterwards neither store is served (the reconnecting store once in
// cmd/tokengate could serve, and leak, a client connected as it closed).
func TestLazyClose(t *testing.T) {
	srv := redistest.Start(t)
	v := storetest.Version(t, 1, 10, "1/s")
	req := &store.Request{Items: []store.Item{{Key: "k", Version: v, Cost: 1}}}
	t.Run("after connecting", func(t *testing.T) {
		o := &opening{t: t, srv: srv}
		f := func(context.Context) {}
		o.connect.Store(&f)
		l := o.open()
		for name, s := range map[string]store.Store{"store": l, "candidate": l.Candidate()} {
			if out, err := s.Decide(context.Background(), req, make([]store.Result, 1)); err != nil || !out.Allowed {
				t.Fatalf("%s connected: %+v %v", name, out, err)
			}
		}
		l.Close()
		l.Close()
		o.wantClosed(l)
		if o.dialed.Load() != 1 {
			t.Fatalf("%d clients dialled, want 1", o.dialed.Load())
		}
	})
	t.Run("while connecting", func(t *testing.T) {
		o := &opening{t: t, srv: srv}
		l := o.open()
		if err := l.Health(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Health before connecting: %v", err)
		}
		dialing := make(chan struct{})
		// The connect that succeeds goes on once Close has begun.
		f := func(ctx context.Context) { close(dialing); <-ctx.Done() }
		o.connect.Store(&f)
		<-dialing
		l.Close()
		o.wantClosed(l)
		if o.dialed.Load() != 1 {
			t.Fatalf("%d clients dialled, want 1", o.dialed.Load())
		}
	})
	t.Run("racing a connect", func(t *testing.T) {
		for range 20 {
			o := &opening{t: t, srv: srv}
			l := o.open()
			dialing := make(chan struct{})
			var once atomic.Bool
			f := func(context.Context) {
				if once.CompareAndSwap(false, true) {
					close(dialing)
				}
			}
			o.connect.Store(&f)
			<-dialing
			l.Close()
			o.wantClosed(l)
		}
	})
}
