package redis

import (
	"fmt"
	"strings"
)

// A static reading of the script (Lua 5.1 as Redis runs it): which names
// each file uses and declares, and how many locals each function holds at
// once. It tokenizes and follows scopes, but parses no expression, which
// is all the checks below need.

// luaToken is one token: kind is 'n' (a name), 'k' (a keyword), '0' (a
// number), 's' (a string) or 'o' (an operator or punctuation).
type luaToken struct {
	kind byte
	text string
	file string
	line int
}

var luaKeywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
	"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
}

// lexLua tokenizes one file; comments and a first line starting with #
// (a library's shebang) are skipped.
func lexLua(file, src string) ([]luaToken, error) {
	var toks []luaToken
	line, i := 1, 0
	if strings.HasPrefix(src, "#") {
		i = strings.IndexByte(src, '\n')
		if i < 0 {
			i = len(src)
		}
	}
	add := func(kind byte, text string) { toks = append(toks, luaToken{kind, text, file, line}) }
	// long skips a long bracket ([[, [=[ ...) at i, if one opens there.
	long := func() (bool, error) {
		j := i + 1
		for j < len(src) && src[j] == '=' {
			j++
		}
		if j >= len(src) || src[i] != '[' || src[j] != '[' {
			return false, nil
		}
		end := strings.Index(src[j:], "]"+strings.Repeat("=", j-i-1)+"]")
		if end < 0 {
			return false, fmt.Errorf("%s:%d: unclosed long bracket", file, line)
		}
		body := src[i : j+end+j-i+1]
		line += strings.Count(body, "\n")
		i += len(body)
		return true, nil
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "--"):
			i += 2
			if ok, err := long(); err != nil {
				return nil, err
			} else if !ok {
				for i < len(src) && src[i] != '\n' {
					i++
				}
			}
		case c == '[':
			start := line
			ok, err := long()
			if err != nil {
				return nil, err
			}
			if ok {
				toks = append(toks, luaToken{'s', "", file, start})
			} else {
				add('o', "[")
				i++
			}
		case c == '"' || c == '\'':
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' {
					j++
				}
				if j < len(src) && src[j] == '\n' {
					line++
				}
			}
			if j >= len(src) {
				return nil, fmt.Errorf("%s:%d: unclosed string", file, line)
			}
			add('s', src[i:j+1])
			i = j + 1
		case isDigit(c) || c == '.' && i+1 < len(src) && isDigit(src[i+1]):
			j, hex := i, strings.HasPrefix(src[i:], "0x") || strings.HasPrefix(src[i:], "0X")
			for j < len(src) && (isNameByte(src[j]) || src[j] == '.' ||
				!hex && (src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E')) {
				j++
			}
			add('0', src[i:j])
			i = j
		case isNameByte(c):
			j := i
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			if w := src[i:j]; luaKeywords[w] {
				add('k', w)
			} else {
				add('n', w)
			}
			i = j
		default:
			n := 1
			for _, op := range []string{"...", "..", "==", "~=", "<=", ">="} {
				if strings.HasPrefix(src[i:], op) {
					n = len(op)
					break
				}
			}
			add('o', src[i:i+n])
			i += n
		}
	}
	return toks, nil
}

func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isNameByte(c byte) bool { return c == '_' || isDigit(c) || isUpper(c) || isLower(c) }

// luaGlobals are the globals of Redis's Lua the script uses (add one
// when it needs another); any other name must be a local in scope.
var luaGlobals = map[string]bool{
	"string": true, "math": true, "table": true, "struct": true, "redis": true,
	"tonumber": true, "tostring": true, "type": true, "unpack": true, "pcall": true, "error": true,
}

// luaArgArrays are the names the script gives a call's or a batch's keys
// and arguments, whose positions are the contract's, never a literal.
var luaArgArrays = map[string]bool{"KEYS": true, "ARGV": true, "keys": true, "args": true, "BARGS": true}

// luaDecl is a local: where it is declared, whether it is at the chunk's
// top level, and how often it is used.
type luaDecl struct {
	name string
	file string
	line int
	top  bool
	uses int
}

func (d *luaDecl) at() string { return fmt.Sprintf("%s:%d", d.file, d.line) }

// luaScan is what scanLua found.
type luaScan struct {
	problems []string   // file:line: what is wrong
	decls    []*luaDecl // every local, in order
	peak     int        // the most locals one function holds at once
	peakAt   string     // that function
}

// luaFrame is an open function, block or bracket. Functions and blocks
// hold locals; a function counts the most it holds at once, its blocks'
// included (Lua allows 200).
type luaFrame struct {
	kind   string // "function", "block", "(", "[" or "{"
	names  map[string]*luaDecl
	locals int    // locals the frame holds, hidden ones (a for's) too
	at     string // a function's place
	peak   int    // a function's most locals at once
}

// luaScanner walks a chunk's tokens.
type luaScanner struct {
	luaScan
	toks   []luaToken
	frames []*luaFrame
	fors   []luaFor
}

// luaFor is a for loop whose variables wait for its do: the frame depth
// of the for, and its variables.
type luaFor struct {
	depth int
	names []luaToken
}

// scanLua reads files as the one chunk they are concatenated into.
func scanLua(files ...luaFile) (luaScan, error) {
	s := &luaScanner{}
	for _, f := range files {
		t, err := lexLua(f.name, f.src)
		if err != nil {
			return luaScan{}, err
		}
		s.toks = append(s.toks, t...)
	}
	s.push("function", "the main chunk")
	for i := 0; i < len(s.toks); i++ {
		i = s.step(i)
	}
	if len(s.frames) != 1 {
		return s.luaScan, fmt.Errorf("%d blocks left open at the end", len(s.frames)-1)
	}
	s.count(s.frames[0])
	return s.luaScan, nil
}

// tok is the token at i, or none.
func (s *luaScanner) tok(i int) luaToken {
	if i < 0 || i >= len(s.toks) {
		return luaToken{}
	}
	return s.toks[i]
}

// step reads the token at i and returns the index of the last it read.
func (s *luaScanner) step(i int) int {
	t, prev, next := s.tok(i), s.tok(i-1), s.tok(i+1)
	switch t.text {
	case "local":
		if next.text == "function" {
			s.declare([]luaToken{s.tok(i + 2)}, 0)
			return s.function(t, i+3, nil)
		}
		list, j := s.names(i + 1)
		s.declare(list, 0)
		return j - 1
	case "function":
		var self []luaToken
		j := i + 1
		if next.kind == 'n' {
			s.use(j)
			for j++; s.tok(j).text == "." || s.tok(j).text == ":"; j += 2 {
				if s.tok(j).text == ":" {
					self = []luaToken{{'n', "self", t.file, t.line}}
				}
			}
		}
		return s.function(t, j, self)
	case "for":
		list, j := s.names(i + 1)
		s.fors = append(s.fors, luaFor{len(s.frames), list})
		return j - 1
	case "do":
		s.push("block", "")
		if n := len(s.fors); n > 0 && s.fors[n-1].depth == len(s.frames)-1 {
			s.declare(s.fors[n-1].names, 3) // the loop's state: 3 hidden locals
			s.fors = s.fors[:n-1]
		}
	case "then", "repeat":
		s.push("block", "")
	case "else":
		s.pop(t, "block")
		s.push("block", "")
	case "elseif", "until":
		s.pop(t, "block")
	case "end":
		s.pop(t, "block function")
	case "(", "[", "{":
		s.push(t.text, "")
	case ")", "]", "}":
		s.pop(t, map[string]string{")": "(", "]": "[", "}": "{"}[t.text])
	default:
		switch {
		case t.kind != 'n' || prev.text == "." || prev.text == ":":
			// not a name, or a field
		case s.frames[len(s.frames)-1].kind == "{" && next.text == "=" && (prev.text == "{" || prev.text == "," || prev.text == ";"):
			// a table constructor's key
		default:
			s.use(i)
		}
	}
	return i
}

// function opens the function whose keyword is t, its parameters (and
// self, for a method) from its "(" at i, and returns the index of its
// ")".
func (s *luaScanner) function(t luaToken, i int, self []luaToken) int {
	s.push("function", fmt.Sprintf("%s:%d", t.file, t.line))
	params := self
	for i++; i < len(s.toks) && s.toks[i].text != ")"; i++ {
		if s.toks[i].kind == 'n' {
			params = append(params, s.toks[i])
		}
	}
	s.declare(params, 0)
	return i
}

// names reads a list of names from i, returning them and the index after
// the list.
func (s *luaScanner) names(i int) ([]luaToken, int) {
	var out []luaToken
	for s.tok(i).kind == 'n' {
		out = append(out, s.toks[i])
		if i++; s.tok(i).text != "," {
			break
		}
		i++
	}
	return out, i
}

func (s *luaScanner) report(t luaToken, format string, args ...any) {
	s.problems = append(s.problems, fmt.Sprintf("%s:%d: ", t.file, t.line)+fmt.Sprintf(format, args...))
}

func (s *luaScanner) push(kind, at string) {
	s.frames = append(s.frames, &luaFrame{kind: kind, names: map[string]*luaDecl{}, at: at})
}

// pop closes the innermost frame at t, which must be one of kinds.
func (s *luaScanner) pop(t luaToken, kinds string) {
	f := s.frames[len(s.frames)-1]
	if len(s.frames) == 1 || !strings.Contains(kinds, f.kind) {
		s.report(t, "%s closes no %s", t.text, kinds)
		return
	}
	s.frames = s.frames[:len(s.frames)-1]
	if f.kind == "function" {
		s.count(f)
	}
}

// count keeps the closed function f's locals if they are the most yet.
func (s *luaScanner) count(f *luaFrame) {
	if f.peak > s.peak {
		s.peak, s.peakAt = f.peak, f.at
	}
}

// resolve is the local name refers to here, or nil.
func (s *luaScanner) resolve(name string) *luaDecl {
	for k := len(s.frames) - 1; k >= 0; k-- {
		if d := s.frames[k].names[name]; d != nil {
			return d
		}
	}
	return nil
}

// declare makes locals of names in the innermost frame, and hidden ones
// more. A top-level local may not be declared again at the top level,
// nor, in upper case, anywhere.
func (s *luaScanner) declare(names []luaToken, hidden int) {
	f, top := s.frames[len(s.frames)-1], len(s.frames) == 1
	for _, t := range names {
		if d := s.resolve(t.text); d != nil && d.top && (top || isUpper(t.text[0])) {
			s.report(t, "%s declared again, hiding the one at %s", t.text, d.at())
		}
		d := &luaDecl{name: t.text, file: t.file, line: t.line, top: top}
		f.names[t.text] = d
		s.decls = append(s.decls, d)
	}
	f.locals += len(names) + hidden
	// The innermost function holds its frames' locals at once.
	k, active := len(s.frames)-1, 0
	for ; s.frames[k].kind != "function"; k-- {
		active += s.frames[k].locals
	}
	fn := s.frames[k]
	fn.peak = max(fn.peak, active+fn.locals)
}

// use reads the name at i: a local's use, one of luaGlobals, or a
// problem.
func (s *luaScanner) use(i int) {
	t := s.toks[i]
	switch d := s.resolve(t.text); {
	case d != nil:
		d.uses++
	case !luaGlobals[t.text]:
		s.report(t, "%s is not defined: not a local in scope, nor a constant of contract.go", t.text)
	}
	if luaArgArrays[t.text] && s.tok(i+1).text == "[" && s.tok(i+2).kind == '0' && s.tok(i+3).text == "]" {
		s.report(t, "%s[%s]: a literal position, not one of contract.go", t.text, s.tok(i+2).text)
	}
}
