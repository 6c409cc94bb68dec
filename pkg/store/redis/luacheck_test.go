package redis

import (
	"slices"
	"strings"
	"testing"
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
