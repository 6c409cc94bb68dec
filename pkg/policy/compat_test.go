package policy

// The compat format: envoyproxy/ratelimit's configuration files, read by
// compatparse.go and compatflat.go.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The reference's own example, integration-test and unit-test files
// (testdata/envoyproxy, unchanged) compile.
func TestCompatFilesCompile(t *testing.T) {
	good, _ := filepath.Glob("testdata/envoyproxy/[eir]*/*.yaml")
	for _, name := range []string{"basic_config", "duplicate_domain", "merge_domain_key1", "merge_domain_key2", "metadata", "shadowmode_config", "share_threshold", "wildcard"} {
		good = append(good, "testdata/envoyproxy/unit/"+name+".yaml")
	}
	if len(good) < 14 {
		t.Fatalf("found only %v", good)
	}
	for _, file := range good {
		t.Run(file, func(t *testing.T) {
			p := mustReadPolicy(t, file)
			if len(p.Domains()) != 1 {
				t.Fatalf("domains %v, want one", p.Domains())
			}
		})
	}
}

func mustReadPolicy(t testing.TB, path string) *Policy {
	t.Helper()
	files, err := ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseFiles(path, files)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The reference's bad files are refused, each with file:line.
func TestCompatBadFiles(t *testing.T) {
	for file, want := range map[string]string{
		"bad_limit_unit":      `bad_limit_unit.yaml:6: domain "test-domain": rate_limit: key1_value1: invalid rate limit unit: unit "foo"`,
		"bad_yaml":            `bad_yaml.yaml:2: yaml: found unexpected end of stream`,
		"duplicate_key":       `duplicate_key.yaml:6: domain "test-domain": descriptors: duplicate descriptor composite key "key1_value1" (first at line 3)`,
		"empty_domain":        `empty_domain.yaml:1: domain: missing`,
		"empty_key":           `empty_key.yaml:3: domain "test-domain": key: descriptor has empty key`,
		"misspelled_key":      `misspelled_key.yaml:5: domain "test-domain": descriptor: unknown field "ratelimit" (did you mean rate_limit?)`,
		"misspelled_key2":     `misspelled_key2.yaml:7: domain "test-domain": rate_limit: unknown field "requestsperunit"`,
		"non_map_list":        `non_map_list.yaml:3: domain "test-domain": descriptor: want a mapping, got "a"`,
		"non_string_key":      `non_string_key.yaml:1: config: unknown field "0.25"`,
		"replaces_empty":      `replaces_empty.yaml:10: domain "test-domain": replaces: key1_value1.subkey1: should not have an empty replaces entry`,
		"replaces_self":       `replaces_self.yaml:10: domain "test-domain": replaces: key1_value1.subkey1: replaces should not contain name of same descriptor`,
		"unlimited_with_unit": `unlimited_with_unit.yaml:6: domain "test-domain": rate_limit: foo: should not specify rate limit unit when unlimited`,
	} {
		t.Run(file, func(t *testing.T) {
			path := "testdata/envoyproxy/unit/" + file + ".yaml"
			files, err := ReadFiles(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseFiles(path, files)
			if err == nil || !strings.HasPrefix(err.Error(), "testdata/envoyproxy/unit/"+want) {
				t.Fatalf("error:\n%v\nwant it to start with:\ntestdata/envoyproxy/unit/%s", err, want)
			}
		})
	}
}

func TestCompatMoreErrors(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"share without wildcard": {"domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`r.yaml:5: domain "d": share_threshold: can only be used with wildcard values (containing '*'), but found key "a_x"`},
		"no unit":  {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", `r.yaml:4: domain "d": rate_limit: a: invalid rate limit unit '': unit missing`},
		"negative": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `r.yaml:4: domain "d": rate_limit: a: requests_per_unit: -1 is out of range`},
		"nested error": {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: 3\n        rate_limit: {unit: fortnight}\n",
			`r.yaml:7: domain "d": rate_limit: a.b_3: invalid rate limit unit: unit "fortnight"`},
		"unknown key": {"domain: d\ndescriptors:\n  - key: a\n    limit: 3\n", `r.yaml:4: domain "d": descriptor: unknown field "limit"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(tc.file))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to start with:\n%s", err, tc.want)
			}
		})
	}
}

// A misplaced key the reference knows is ignored, as there, with a warning.
func TestCompatMisplacedKeyWarns(t *testing.T) {
	p, err := Parse("r.yaml", []byte("domain: d\nunit: second\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ws := p.Warnings()
	if len(ws) != 2 || !strings.HasPrefix(ws[0].Error(), `r.yaml:2: unit: config: ignored here`) || !strings.HasPrefix(ws[1].Error(), `r.yaml:5: domain "d": shadow_mode: rate_limit: ignored here`) {
		t.Fatalf("warnings %v", ws)
	}
	if p.Rules("d")[0].Shadow {
		t.Fatal("a misplaced shadow_mode took effect")
	}
}

// A directory is one domain a file; a domain in two files names both.
func TestCompatDirectory(t *testing.T) {
	p := mustReadPolicy(t, "testdata/envoyproxy/integration")
	if got := strings.Join(p.Domains(), " "); got != "another basic share-threshold-test" {
		t.Fatalf("domains %s", got)
	}
	if r := p.Match("basic", []Entry{{"key1", "x"}}); r == nil || r.File != "testdata/envoyproxy/integration/basic.yaml" || r.Line != 3 {
		t.Fatalf("rule %+v", r)
	}
	dir := t.TempDir()
	for name, from := range map[string]string{"a.yaml": "unit/basic_config.yaml", "b.yaml": "unit/duplicate_domain.yaml", "c.yml": "unit/bad_yaml.yaml", ".hidden.yaml": "unit/bad_yaml.yaml"} {
		data, err := os.ReadFile("testdata/envoyproxy/" + from)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), data, 0o644)
	}
	files, err := ReadFiles(dir)
	if err != nil || len(files) != 2 {
		t.Fatalf("read %d files: %v", len(files), err)
	}
	_, err = ParseFiles(dir, files)
	want := filepath.Join(dir, "b.yaml") + `:1: domain "test-domain": repeated domain: also in ` + filepath.Join(dir, "a.yaml") + ":2"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}

// describe says what a descriptor gets: "none" (no rule, or a stop),
// "unlimited", or "N/unit name=... [deny] [shadow]".
func describeMatch(p *Policy, domain string, kv ...string) string {
	r := p.Match(domain, entries(kv...))
	switch {
	case r == nil || r.NotLimited:
		return "none"
	case r.Unlimited:
		return "unlimited"
	}
	s := fmt.Sprintf("%d/%s name=%s", r.Limit.RequestsPerUnit, r.Limit.Unit, r.Limit.Name)
	if r.Deny {
		s += " deny"
	}
	if r.Shadow {
		s += " shadow"
	}
	return s
}

// The compiled rules match as the reference's GetLimit does (its unit
// tests' expectations, and the walk's corners).
func TestCompatMatch(t *testing.T) {
	basic := mustReadPolicy(t, "testdata/envoyproxy/unit/basic_config.yaml")
	wild := mustReadPolicy(t, "testdata/envoyproxy/unit/wildcard.yaml")
	example := mustReadPolicy(t, "testdata/envoyproxy/examples/example.yaml")
	walk, err := Parse("walk.yaml", []byte(`domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: x*
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: w
    value: f*
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: w
    value: fo*
    rate_limit: {unit: hour, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p      *Policy
		domain string
		kv     []string
		want   string
	}{
		{basic, "test-domain", []string{"key1", "something"}, "none"},
		{basic, "test-domain", []string{"key1", "value1"}, "none"},
		{basic, "test-domain", []string{"key2", "value2", "subkey", "subvalue"}, "none"},
		{basic, "test-domain", []string{"key5", "value5", "subkey5", "subvalue"}, "none"},
		{basic, "test-domain", []string{"key1", "value1", "subkey1", "something"}, "5/second name="},
		{basic, "test-domain", []string{"key1", "value1", "subkey1", "subvalue1"}, "10/second name="},
		{basic, "test-domain", []string{"key2", "something"}, "20/minute name="},
		{basic, "test-domain", []string{"key2", "value2"}, "30/minute name="},
		{basic, "test-domain", []string{"key2", "value3"}, "none"}, // a node without a limit stops the walk
		{basic, "test-domain", []string{"key3", "foo"}, "1/hour name="},
		{basic, "test-domain", []string{"key4", "foo"}, "1/day name=key4_rate_limit"},
		{basic, "test-domain", []string{"key5", "value5"}, "15/day name="},
		{basic, "test-domain", []string{"key5", "value5", "subkey5", "subvalue5"}, "25/day name="},
		{basic, "test-domain", []string{"key6", "foo"}, "unlimited"},
		{basic, "test-domain", []string{"key7", "unspecified_value"}, "70/minute name="},
		{basic, "other", []string{"key2", "x"}, "none"},
		{wild, "test-domain", []string{"noVal", "foo1"}, "20/minute name="},
		{wild, "test-domain", []string{"wild", "foo1"}, "20/minute name="},
		{wild, "test-domain", []string{"wild", "foo"}, "20/minute name="},
		{wild, "test-domain", []string{"nestedWild", "val1", "wild", "goo2"}, "20/minute name="},
		{wild, "test-domain", []string{"wild", "bar"}, "none"},
		{wild, "test-domain", []string{"noWild", "foo1"}, "none"},
		{wild, "test-domain", []string{"midWild", "barab"}, "20/minute name="},
		{wild, "test-domain", []string{"midWild", "barb"}, "20/minute name="},
		{wild, "test-domain", []string{"midWild", "bara"}, "none"},
		{wild, "test-domain", []string{"midWild", "xbarb"}, "none"},
		{wild, "test-domain", []string{"multiWild", "foo123bar456baz"}, "10/minute name="},
		{wild, "test-domain", []string{"multiWild", "foobarbaz"}, "10/minute name="},
		{wild, "test-domain", []string{"multiWild", "foobaz"}, "none"},
		{example, "rl", []string{"foo", "x", "bar", "banned"}, "0/minute name=banned_limit deny"},
		{example, "rl", []string{"foo", "x", "bar", "bkthomps"}, "1/minute name=bkthomps"},
		{example, "rl", []string{"foo", "x", "bar", "y"}, "3/minute name="},
		{example, "rl", []string{"foo", "x", "baz", "shady"}, "3/minute name= shadow"},
		{example, "rl", []string{"foo", "x", "bay", "y"}, "unlimited"},
		{example, "rl", []string{"foo", "x"}, "2/minute name="},
		{example, "rl", []string{"foo", "x", "qux", "y"}, "none"},
		{walk, "d", []string{"a", "x", "b", "1"}, "1/second name="},
		{walk, "d", []string{"a", "x", "c", "1"}, "none"}, // the walk took a=x and does not back up
		{walk, "d", []string{"a", "xy", "c", "1"}, "3/second name="},
		{walk, "d", []string{"a", "y", "c", "1"}, "2/second name="},
		{walk, "d", []string{"w", "foo"}, "4/hour name="}, // the first wildcard in file order
	} {
		if got := describeMatch(tc.p, tc.domain, tc.kv...); got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.domain, tc.kv, got, tc.want)
		}
	}
	if ws := walk.Warnings(); len(ws) != 1 || !strings.Contains(ws[0].Error(), `walk.yaml:20: domain "d" rule "w_fo*": never matches: "w_f*" (line 17)`) {
		t.Errorf("warnings %v", ws)
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, value string
		want        bool
	}{
		{"bar*b", "barab", true}, {"bar*b", "barb", true}, {"bar*b", "bara", false}, {"bar*b", "xbarb", false},
		{"ab*ba", "aba", false}, {"ab*ba", "abba", true}, {"a*b*c", "abc", true}, {"a*b*c", "acb", false},
		{"a*b*c", "a-b--c", true}, {"*x*", "x", true}, {"*x*", "y", false}, {"**", "", true}, {"a*b*b", "abb", true}, {"a*b*b", "ab", false},
	} {
		if got := globMatch(tc.glob, tc.value); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.glob, tc.value, got)
		}
	}
}

// A large reference file compiles in about the time of a native one: a
// key sequence visits only its own nodes (TestScale has the native
// figures).
func TestCompatScale(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range 20000 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: 5}\n", i)
	}
	for i := range 2000 {
		fmt.Fprintf(&b, "  - key: tenant\n    value: t%d\n    descriptors:\n      - key: path\n        value: /api/%d/*\n        rate_limit: {unit: minute, requests_per_unit: 9}\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 3}\n", i, i)
	}
	start := time.Now()
	p, err := Parse("big.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Rules("big")); n != 24000 {
		t.Fatalf("%d rules", n)
	}
	if got := describeMatch(p, "big", "tenant", "t7", "path", "/api/7/x"); got != "9/minute name=" {
		t.Fatalf("match: %s", got)
	}
	// About 1 s alone, 5-8 s under the race detector beside another
	// package's tests.
	limit := 5 * time.Second
	if raceEnabled {
		limit *= 6
	}
	if d := time.Since(start); d > limit {
		t.Fatalf("%d bytes compiled in %v, want under %v", b.Len(), d, limit)
	}
}

// A directory may mix one native file, which alone sets revision and
// request_id_key, with reference files; a second native file is an error.
func TestMixedDirectory(t *testing.T) {
	native := File{Name: "d/native.yaml", Data: []byte("revision: 7\nrequest_id_key: rid\ndomains:\n  edge:\n    - {name: u, match: [{key: user}], capacity: 2, refill: 1/s}\n")}
	compat := File{Name: "d/compat.yaml", Data: []byte("domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n")}
	p, err := ParseFiles("d", []File{native, compat})
	if err != nil {
		t.Fatal(err)
	}
	if p.Revision() != 7 || p.RequestIDKey() != "rid" || strings.Join(p.Domains(), ",") != "edge,rl" || p.Name() != "d" {
		t.Fatalf("policy %s", p.Summary())
	}
	if r := p.Match("edge", []Entry{{"user", "a"}}); r == nil || r.File != "d/native.yaml" {
		t.Fatalf("edge rule %+v", r)
	}
	again := File{Name: "d/other.yaml", Data: native.Data}
	_, err = ParseFiles("d", []File{native, compat, again})
	if err == nil || !strings.HasPrefix(err.Error(), "d/other.yaml:1: a second native policy file (the first is d/native.yaml)") {
		t.Fatalf("error %v", err)
	}
	if a, b := FilesSHA256("d", []File{native, compat}), FilesSHA256("d", []File{native, {Name: compat.Name, Data: append(compat.Data, '#')}}); a == b {
		t.Fatal("the set's sum ignores a file's content")
	}
}
