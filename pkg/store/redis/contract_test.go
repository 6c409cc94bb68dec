package redis

import (
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write lua/contract.lua from contract.go (go generate)")

// TestLuaContractFresh: lua/contract.lua is what contract.go generates.
// With -update (go generate) it writes the file instead.
func TestLuaContractFresh(t *testing.T) {
	want, err := generateContract("contract.go")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("lua/contract.lua", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, next := strings.Split(luaContract, "\n"), strings.Split(want, "\n")
	for i := range max(len(have), len(next)) {
		if i >= len(have) || i >= len(next) || have[i] != next[i] {
			t.Fatalf("lua/contract.lua is stale (run go generate ./pkg/store/redis/): line %d is %q, want %q", i+1, at(have, i), at(next, i))
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}

// generateContract is lua/contract.lua for the Go file path: a local per
// constant, named by luaName, in the order declared, each with the Go
// constant it stands for.
func generateContract(path string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return "", err
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	if _, err := new(types.Config).Check("redis", fset, []*ast.File{f}, info); err != nil {
		return "", fmt.Errorf("%s holds only constants that depend on nothing else: %w", path, err)
	}
	var b strings.Builder
	b.WriteString("-- Code generated from contract.go by go generate; DO NOT EDIT.\n" +
		"-- The Go<->Lua contract: each local is the Go constant beside it.\n")
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			return "", fmt.Errorf("%s: only constants belong in the contract", fset.Position(d.Pos()))
		}
		plus := int64(0)
		if g.Doc != nil && g.Doc.List[len(g.Doc.List)-1].Text == "//lua:plus1" {
			plus = 1
		}
		for _, s := range g.Specs {
			for _, id := range s.(*ast.ValueSpec).Names {
				v := info.Defs[id].(*types.Const).Val()
				goName := id.Name
				if plus != 0 {
					goName += " + 1"
				}
				switch v.Kind() {
				case constant.Int:
					n, _ := constant.Int64Val(v)
					fmt.Fprintf(&b, "local %s = %d -- %s\n", luaName(id.Name), n+plus, goName)
				case constant.String:
					fmt.Fprintf(&b, "local %s = %s -- %s\n", luaName(id.Name), luaString(constant.StringVal(v)), goName)
				default:
					return "", fmt.Errorf("%s: %s is neither an integer nor a string", fset.Position(id.Pos()), id.Name)
				}
			}
		}
	}
	return b.String(), nil
}

// luaName is a Go name in upper case, a word a part: argIDMode is
// ARG_ID_MODE, replyExtra1 REPLY_EXTRA1.
func luaName(name string) string {
	var b strings.Builder
	for i := range len(name) {
		if i > 0 && isUpper(name[i]) && (!isUpper(name[i-1]) || i+1 < len(name) && isLower(name[i+1])) {
			b.WriteByte('_')
		}
		b.WriteByte(name[i])
	}
	return strings.ToUpper(b.String())
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }

// luaString is s as a Lua string literal: printable ASCII as it is, every
// other byte (and the quote and backslash) as a decimal escape.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := range len(s) {
		if c := s[i]; c >= ' ' && c <= '~' && c != '"' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
