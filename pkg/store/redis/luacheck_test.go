package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/redistest"
)

// TestLuaNames: the script uses no name that is not defined (in Lua an
// undefined name is a global, nil until a call reaches it), no literal
// KEYS or ARGV position, declares no top-level name twice, and every
// constant of contract.go is used by some file (each is one of the
// chunk's locals).
func TestLuaNames(t *testing.T) {
	s, err := scanLua(luaFiles...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.problems {
		t.Error(p)
	}
	for _, d := range s.decls {
		if d.file == "lua/contract.lua" && d.uses == 0 {
			t.Errorf("%s: %s is used by no Lua file: drop its constant from contract.go, or use it", d.at(), d.name)
		}
	}
}

// TestLuaNamesCatchTypos: TestLuaNames's checks find each kind of
// mistake in a snippet read after the contract, and take no key, field,
// string or comment for a name.
func TestLuaNamesCatchTypos(t *testing.T) {
	snippet := `local KEYS, ARGV
local now = ARGV[ARG_NWO]
local op = ARGV[1]
local ARG_NOW = 3
do local ONLY = 1 end
local z = ONLY
local w = tonumbr(KEYS[ARG_ITEMS])
local t = {ARG_TYPO = 1, x = 'ARG_TYPO', [ARG_OP] = "--[[ ARG_TYPO"}
-- ARG_TYPO
local u = t.ARG_TYPO
local function f(a) return a[ITEM_COST] end
for i = 1, HEADER_ARGS do u = i end
`
	s, err := scanLua(luaFile{"lua/contract.lua", luaContract}, luaFile{"typo.lua", snippet})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"typo.lua:2: ARG_NWO is not defined",
		"typo.lua:3: ARGV[1]: a literal position",
		"typo.lua:4: ARG_NOW declared again, hiding the one at lua/contract.lua:",
		"typo.lua:6: ONLY is not defined",
		"typo.lua:7: tonumbr is not defined",
	}
	if len(s.problems) != len(want) {
		t.Fatalf("found %d problems, want %d:\n%s", len(s.problems), len(want), strings.Join(s.problems, "\n"))
	}
	for i, p := range s.problems {
		if !strings.HasPrefix(p, want[i]) {
			t.Errorf("problem %d is %q, want it to start with %q", i, p, want[i])
		}
	}
	used := func(name string) bool {
		i := slices.IndexFunc(s.decls, func(d *luaDecl) bool { return d.name == name })
		return s.decls[i].uses > 0
	}
	if !used("ARG_OP") || !used("HEADER_ARGS") || used("ARG_NOW") || used("ITEM_ARGS") {
		t.Error("uses of the contract's names miscounted")
	}
}

// luaLocalsBudget is the most locals the script may hold at once in one
// function, in either form: Lua allows 200, and the rest is kept for the
// EVAL form's own and what is to come.
const luaLocalsBudget = 190

// TestLuaLocals: the script's chunk, as a function library (its body in
// build) and as an EVAL script (two locals more), is within the budget.
func TestLuaLocals(t *testing.T) {
	for _, form := range []luaFile{{"the FCALL library", script.library}, {"the EVAL script", script.src}} {
		s, err := scanLua(form)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d locals at once, in %s (budget %d, Lua's limit 200)", form.name, s.peak, s.peakAt, luaLocalsBudget)
		if s.peak > luaLocalsBudget {
			t.Errorf("%s holds %d locals at once, in %s: more than the budget of %d (Lua allows 200); "+
				"put cold code's functions in a table, one local, as lua/bignum.lua's BN", form.name, s.peak, s.peakAt, luaLocalsBudget)
		}
	}
}

// TestLuaLocalsMatchRedis: scanLua counts locals as Redis's Lua does: a
// chunk padded with locals up to 200 at once compiles, with one more it
// does not. For the EVAL script, and for a snippet with the blocks and
// loops whose locals count while they are open.
func TestLuaLocalsMatchRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	snippet := "local a, b\ndo local c, d, e end\nfor i = 1, 2 do local f end\n" +
		"for k, v in string.gmatch('', '(.)(.)') do end\nlocal function g(x) local y end\nreturn a"
	for _, src := range []luaFile{{"the EVAL script", script.src}, {"a snippet", snippet}} {
		s, err := scanLua(src)
		if err != nil {
			t.Fatal(err)
		}
		if s.peakAt != "the main chunk" {
			t.Fatalf("%s holds the most locals in %s, not in its main chunk", src.name, s.peakAt)
		}
		for _, pad := range []int{200 - s.peak, 201 - s.peak} {
			names := make([]string, pad)
			for i := range names {
				names[i] = "pad" + strconv.Itoa(i)
			}
			padded := "local " + strings.Join(names, ", ") + "\n" + src.src
			err := c.Do(context.Background(), c.B().ScriptLoad().Script(padded).Build()).Error()
			switch {
			case pad+s.peak <= 200 && err != nil:
				t.Errorf("%s counted %d locals, but with %d more Redis says: %v", src.name, s.peak, pad, err)
			case pad+s.peak > 200 && (err == nil || !strings.Contains(err.Error(), "local variables")):
				t.Errorf("%s counted %d locals, but with %d more Redis compiles it (%v)", src.name, s.peak, pad, err)
			}
		}
	}
}
