package redis

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/rueidis"
)

var (
	//go:embed lua/contract.lua
	luaContract string
	//go:embed lua/bignum.lua
	luaBignum string
	//go:embed lua/bucket.lua
	luaBucket string
	//go:embed lua/fast.lua
	luaFast string
	//go:embed lua/codec.lua
	luaCodec string
	//go:embed lua/lean.lua
	luaLean string
	//go:embed lua/holds.lua
	luaHolds string
	//go:embed lua/ops.lua
	luaOps string
	//go:embed lua/batch.lua
	luaBatch string
)

// luaFiles are the files of the code every call runs, in the order they
// are concatenated (each defines locals the next uses): the contract
// generated from contract.go, bignums, the bucket arithmetic on them, the
// same on plain numbers, the codec, reservations, the operations, the lean path of the
// usual decision, and batches with the one entry, main.
var luaFiles = []luaFile{
	{"lua/contract.lua", luaContract}, {"lua/bignum.lua", luaBignum}, {"lua/bucket.lua", luaBucket},
	{"lua/fast.lua", luaFast}, {"lua/codec.lua", luaCodec}, {"lua/holds.lua", luaHolds},
	{"lua/ops.lua", luaOps},
	{"lua/lean.lua", luaLean}, {"lua/batch.lua", luaBatch},
}

// luaFile is one file of the script: its path in this package, its code.
type luaFile struct{ name, src string }

// script is that code as one chunk.
var script = newScript(luaFiles...)

// luaScript is that code in two forms. As a Redis function library
// (Redis 7 and Valkey: FUNCTION LOAD once, then FCALL), its definitions
// run once, on the first call (a library's top level may not touch
// Lua's standard library, so it is wrapped in build), and every later
// call runs only main: that is most of the script's cost saved on every
// call. As an EVAL script (older servers, or where FUNCTION is not
// allowed) it defines everything on every call. Both are named by a hash
// of the code, so replicas running different versions of tokengate never
// replace each other's code. The function is registered with the flag
// allow-cross-slot-keys, so that a batch on a Cluster node may touch keys
// of several of the node's slots (batch.go); an EVAL script without flags
// may anyway.
type luaScript struct {
	name    string // the library and its function
	library string // FUNCTION LOAD source
	src     string // EVAL source
	sha     string // of src
}

func newScript(files ...luaFile) luaScript {
	parts := make([]string, len(files))
	for i, f := range files {
		parts[i] = f.src
	}
	body := strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(body))
	name := "tokengate_" + hex.EncodeToString(sum[:8])
	l := luaScript{
		name: name,
		library: "#!lua name=" + name + "\nlocal entry\nlocal function build()\n" + body + "\nreturn main\nend\n" +
			"redis.register_function{function_name = '" + name + "', callback = function(keys, args)\n" +
			"  if not entry then entry = build() end\n  return entry(keys, args)\nend, flags = {'allow-cross-slot-keys'}}\n",
		src: "local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV\n" + body +
			"\nif redis.replicate_commands then pcall(redis.replicate_commands) end\nreturn main(EVAL_KEYS, EVAL_ARGV)\n",
	}
	srcSum := sha1.Sum([]byte(l.src))
	l.sha = hex.EncodeToString(srcSum[:])
	return l
}

// fcall builds the FCALL of the library's function.
func (l luaScript) fcall(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Fcall().Function(l.name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// evalsha builds the EVALSHA call of the script.
func (l luaScript) evalsha(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Evalsha().Sha1(l.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// eval builds the EVAL call, which also loads the script into the cache.
func (l luaScript) eval(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Eval().Script(l.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}
