package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The shared clock. Every replica decides on its own monotonic clock
// (Options.Clock, the one its requests are read on) mapped onto one
// shared epoch: shared = monotonic + offset. No wall clock is read while
// deciding, so no step of any host's wall clock, the Redis host's
// included, mints or freezes tokens.
//
// The offset is fixed once, when the store first reaches Redis
// (anchor), by one explicit rule:
//
//   - if a live replica has published its shared time in the last
//     clockPublishTTL (the clock key, written by every replica each second;
//     see publishClock), the new replica takes that time, advanced by the
//     key's age;
//   - otherwise (the first replica, or all of them restarted) it takes the
//     Redis host's TIME.
//
// Either way the reading is the midpoint of one round trip. So replicas
// agree to within a round trip and whatever the Redis host's wall clock
// did during the key's age (at most clockPublishTTL); only a replica that
// starts when none is alive takes a step of that clock with it. The key
// expires on that wall clock too: a replica that starts just after it
// stepped forward by more than clockPublishTTL finds no key and takes the
// step (an open gap, stated in the note). Skew
// between replicas is bounded by that: a replica ahead by d refills a
// bucket at most d*rate early, once (its cursor then leads, and the
// replicas behind it get nothing more until their clocks pass it); none
// ever moves a cursor back.
type sharedClock struct {
	mu       sync.Mutex
	anchored atomic.Bool
	offset   atomic.Int64
}

// clockPublishTTL is how long a published shared time stays a valid
// anchor.
const clockPublishTTL = 5 * time.Second

// clockKey holds the latest shared time a replica published.
func (s *Store) clockKey() string { return s.opts.KeyPrefix + "clock" }

// now is the shared time of the monotonic instant mono, anchoring first
// if needed.
func (s *Store) now(ctx context.Context, mono int64) (int64, error) {
	if !s.clock.anchored.Load() {
		if err := s.anchor(ctx); err != nil {
			return 0, err
		}
	}
	return mono + s.clock.offset.Load(), nil
}

// anchor fixes the offset by the rule above; once anchored it never
// moves.
func (s *Store) anchor(ctx context.Context) error {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	if s.clock.anchored.Load() {
		return nil
	}
	c := s.client
	key := s.clockKey()
	before := s.opts.Clock.Now()
	res := c.DoMulti(ctx, c.B().Get().Key(key).Build(), c.B().Pttl().Key(key).Build(), c.B().Time().Build())
	mid := before + (s.opts.Clock.Now()-before)/2
	var shared int64
	published, err := res[0].AsInt64()
	switch pttl, perr := res[1].AsInt64(); {
	case err == nil && perr == nil && pttl > 0:
		age := clockPublishTTL - time.Duration(pttl)*time.Millisecond
		shared = published + int64(max(age, 0))
	case err != nil && !rueidis.IsRedisNil(err):
		return fmt.Errorf("redis: read the shared clock: %w", err)
	default:
		t, err := res[2].AsStrSlice()
		if err != nil || len(t) != 2 {
			return fmt.Errorf("redis: TIME for the shared clock: %v %w", t, err)
		}
		sec, err1 := strconv.ParseInt(t[0], 10, 64)
		usec, err2 := strconv.ParseInt(t[1], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("redis: TIME %v", t)
		}
		shared = sec*int64(time.Second) + usec*int64(time.Microsecond)
	}
	s.clock.offset.Store(shared - mid)
	s.clock.anchored.Store(true)
	return s.publishClock(ctx)
}

// publishClock writes this replica's shared time, for replicas that start
// later to anchor on (Watch calls it every interval).
func (s *Store) publishClock(ctx context.Context) error {
	if !s.clock.anchored.Load() {
		return nil
	}
	now := s.opts.Clock.Now() + s.clock.offset.Load()
	c := s.client
	err := c.Do(ctx, c.B().Set().Key(s.clockKey()).Value(strconv.FormatInt(now, 10)).Px(clockPublishTTL).Build()).Error()
	if err != nil {
		return fmt.Errorf("redis: publish the shared clock: %w", err)
	}
	return nil
}
