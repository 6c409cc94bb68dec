package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/rueidis"
)

var (
	//go:embed lua/bignum.lua
	luaBignum string
	//go:embed lua/bucket.lua
	luaBucket string
	//go:embed lua/decide.lua
	luaDecide string
)

// script is the one Lua script every decision runs: the three files
// concatenated (each defines locals the next uses).
var script = newScript(luaBignum, luaBucket, luaDecide)

type luaScript struct {
	src string
	sha string
}

func newScript(parts ...string) luaScript {
	src := strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(src))
	return luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// evalsha builds the EVALSHA call of the script.
func (l luaScript) evalsha(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Evalsha().Sha1(l.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// eval builds the EVAL call, which also loads the script into the cache.
func (l luaScript) eval(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Eval().Script(l.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// call runs the script by SHA: one round trip while the script is cached.
// A NOSCRIPT answer (SCRIPT FLUSH, a restart, a failover to a node that
// never saw it) costs one more round trip: EVAL sends the source, which
// caches it again.
func (s *Store) call(ctx context.Context, keys, args []string) ([]rueidis.RedisMessage, error) {
	res := s.client.Do(ctx, script.evalsha(s.client, keys, args))
	if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
		s.metrics.reloads.Inc()
		res = s.client.Do(ctx, script.eval(s.client, keys, args))
	}
	return res.ToArray()
}

// callMulti runs several calls at once (one per hash slot; the cluster
// client sends each to its node, pipelined) and retries NOSCRIPT ones.
func (s *Store) callMulti(ctx context.Context, calls []call) {
	cmds := make(rueidis.Commands, len(calls))
	for i := range calls {
		cmds[i] = script.evalsha(s.client, calls[i].keys, calls[i].args)
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
			s.metrics.reloads.Inc()
			res = s.client.Do(ctx, script.eval(s.client, calls[i].keys, calls[i].args))
		}
		calls[i].reply, calls[i].err = res.ToArray()
	}
}

// call is one script call of a multi-slot request.
type call struct {
	keys, args []string
	reply      []rueidis.RedisMessage
	err        error
}
