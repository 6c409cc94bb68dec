package redis

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/logbudget"
)

// Calls go by FCALL while the server has functions: one round trip. A
// server that lost the library (a restart without persistence, a
// failover to a node that never had it, FUNCTION FLUSH) answers "Function
// not found" without running anything, so the store loads the library
// (on every node of a Cluster) and calls again. A server without
// functions (before Redis 7) or an account not allowed to load them
// makes the store call by EVALSHA from then on, with EVAL (which caches
// the script) after a NOSCRIPT.

// call runs the script for one hash slot.
func (s *Store) call(ctx context.Context, keys, args []string) ([]rueidis.RedisMessage, error) {
	return s.callOn(ctx, nil, keys, args)
}

// callOn runs the script through c, when not nil: the cluster client's
// connection to the node our map of the Cluster (nodes.go) says serves
// the keys. After a failover our map, read again within topologyEvery of
// a failed call, knows the promoted master before the cluster client's
// own map does (it is read again up to a second after a failed call), so
// the node's calls reach it at once. A node that answers MOVED or ASK (our
// map stale, a slot migrating) gets the call again through the cluster
// client, which follows the redirect, and our map is read again.
func (s *Store) callOn(ctx context.Context, c rueidis.Client, keys, args []string) ([]rueidis.RedisMessage, error) {
	if c != nil {
		msgs, err := s.callThrough(ctx, c, keys, args)
		if e, ok := rueidis.IsRedisErr(err); !ok || !redirect(e) {
			return msgs, err
		}
		s.nodes.stale()
	}
	return s.callThrough(ctx, s.client, keys, args)
}

// redirect reports whether e sends the call to another node.
func redirect(e *rueidis.RedisError) bool {
	_, moved := e.IsMoved()
	_, ask := e.IsAsk()
	return moved || ask
}

// callThrough runs the script through client c.
func (s *Store) callThrough(ctx context.Context, c rueidis.Client, keys, args []string) ([]rueidis.RedisMessage, error) {
	if !s.evalOnly.Load() {
		res := c.Do(ctx, script.fcall(c, keys, args))
		if !s.retryAs(ctx, res.Error()) {
			return res.ToArray()
		}
		if !s.evalOnly.Load() {
			return c.Do(ctx, script.fcall(c, keys, args)).ToArray()
		}
	}
	res := c.Do(ctx, script.evalsha(c, keys, args))
	if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
		s.metrics.reloads.Inc()
		res = c.Do(ctx, script.eval(c, keys, args))
	}
	return res.ToArray()
}

// callMulti runs several calls at once (one per hash slot; the cluster
// client sends each to its node, pipelined); one whose script did not run
// goes again as call would.
func (s *Store) callMulti(ctx context.Context, calls []call) {
	fn := !s.evalOnly.Load()
	cmds := make(rueidis.Commands, len(calls))
	for i := range calls {
		if fn {
			cmds[i] = script.fcall(s.client, calls[i].keys, calls[i].args)
		} else {
			cmds[i] = script.evalsha(s.client, calls[i].keys, calls[i].args)
		}
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		calls[i].reply, calls[i].err = res.ToArray()
		e, isRedis := rueidis.IsRedisErr(res.Error())
		if fn && s.retryAs(ctx, res.Error()) || !fn && isRedis && e.IsNoScript() {
			calls[i].reply, calls[i].err = s.call(ctx, calls[i].keys, calls[i].args)
		}
	}
}

// call is one script call of a multi-slot request: laid out (args) or
// compact (a reserve, cross.go), answered by reply or, packed, by the
// lean path.
type call struct {
	keys, args []string
	compact    *compactCall
	reply      []rueidis.RedisMessage
	packed     string
	err        error
}

// retryAs reports whether a call's error means the script did not run
// and can be called again: the library was missing (and is now loaded),
// or functions are not to be had (and the store now calls by EVALSHA).
func (s *Store) retryAs(ctx context.Context, err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	switch {
	case !ok:
		return false
	case strings.Contains(e.Error(), "Function not found"):
		s.metrics.reloads.Inc()
		// Every call finds the library missing until it loads: a line
		// per failureLogEvery.
		if err := s.loadLibrary(ctx); err != nil && !s.evalOnly.Load() {
			if dropped, ok := s.logs.load.Take(s.opts.Clock.Now()); ok {
				s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "redis: cannot load the tokengate function library",
					slog.String("error", err.Error()), logbudget.Dropped(dropped))
			}
		}
		return true
	case noFunctions(e):
		s.useEval(e)
		return true
	}
	return false
}

// noFunctions: the server has no FCALL, or the account may not use it.
func noFunctions(e *rueidis.RedisError) bool {
	msg := strings.ToLower(e.Error())
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm")
}

func (s *Store) useEval(reason error) {
	if !s.evalOnly.Swap(true) {
		s.opts.Logger.Info("redis: functions unavailable, calling the script by EVALSHA (more Redis CPU per decision)",
			slog.String("reason", reason.Error()))
	}
}

// loadLibrary loads the function library on every node that takes it (a
// replica refuses; its master's library reaches it by replication).
func (s *Store) loadLibrary(ctx context.Context) error {
	load := func(c rueidis.Client) error {
		err := c.Do(ctx, c.B().FunctionLoad().FunctionCode(script.library).Build()).Error()
		if e, ok := rueidis.IsRedisErr(err); ok {
			switch {
			case strings.Contains(e.Error(), "already exists"):
				return nil
			case noFunctions(e):
				s.useEval(e)
			}
		}
		return err
	}
	if !s.cluster {
		return load(s.client)
	}
	var errs []error
	loaded := false
	for _, n := range s.client.Nodes() {
		if err := load(n); err != nil {
			errs = append(errs, err)
		} else {
			loaded = true
		}
	}
	if loaded {
		return nil
	}
	return errors.Join(errs...)
}
