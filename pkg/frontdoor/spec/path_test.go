package spec_test

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
)

func TestNormalizePath(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"normal", "/login", "/login"},
		{"root", "/", "/"},
		// The spellings of /login that got fresh buckets.
		{"double slash", "//login", "/login"},
		{"dot segment", "/./login", "/login"},
		{"encoded unreserved", "/%6cogin", "/login"},
		{"encoded unreserved, upper-case hex", "/%6Co%67in", "/login"},
		{"dot-dot segment", "/api/../login", "/login"},
		{"path parameter", "/login;jsessionid=1", "/login"},
		{"parameters of every segment", "/a;x=1/b;y/c;", "/a/b/c"},
		{"dot-dot with a parameter (Tomcat's ..;)", "/api/..;/login", "/login"},
		{"backslash", `\login`, "/login"},
		{"backslash dot-dot", `/a/..\c`, "/c"},
		{"slashes everywhere", "///a//b///c", "/a/b/c"},
		// %2F is data, never a separator.
		{"encoded slash kept", "/a%2Fb", "/a%2Fb"},
		{"encoded slash, hex upper-cased", "/a/%2F%2f/c", "/a/%2F%2F/c"},
		{"encoded slash is no dot-dot", "/api/..%2Flogin", "/api/..%2Flogin"},
		{"encoded backslash kept", "/%5c%25", "/%5C%25"},
		{"2-byte sequence kept", "/%c0%af", "/%C0%AF"},
		// %2e is "." (unreserved), so %2e%2e is a dot-dot segment, as in Envoy.
		{"encoded dot-dot", "/a/b/%2e%2e/c", "/a/c"},
		{"encoded dot-dot, upper-case", "/a/b/%2E%2E/c", "/a/c"},
		{"half-encoded dot-dot", "/a/b/%2E./c", "/a/c"},
		{"other half-encoded dot-dot", "/a/b/.%2e/c", "/a/c"},
		{"encoded dot", "/a/b/%2E/c", "/a/b/c"},
		{"encoded dot in a name", "/a%2ejson", "/a.json"},
		// Edges.
		{"empty", "", "/"},
		{"no leading slash", "login", "/login"},
		{"relative with dot-dot", "a/b/../c", "/a/c"},
		{"dot-dot above the root", "/..", "/"},
		{"dot-dot above the root, then a path", "/../a/b", "/a/b"},
		{"more dot-dots than segments", "/a/b/../../../../c", "/c"},
		{"bare dot-dot", "..", "/"},
		{"bare dot", ".", "/"},
		{"trailing dot-dot keeps the slash", "/a/b/..", "/a/"},
		{"trailing dot keeps the slash", "/a/.", "/a/"},
		{"three dots are a name", "/.../a", "/.../a"},
		{"dot-files are names", "/.well-known/x", "/.well-known/x"},
		// Left to the actions: trailing slash and case.
		{"trailing slash kept", "/api/x/", "/api/x/"},
		{"case kept", "/API/X", "/API/X"},
		// Bytes a path may not hold are encoded; stray "%" too.
		{"space", "/a b", "/a%20b"},
		{"encoded space", "/a%20b", "/a%20b"},
		{"non-ASCII", "/ü", "/%C3%BC"},
		{"control", "/a\x00b", "/a%00b"},
		{"stray percent", "/100%", "/100%25"},
		{"percent without hex", "/%zz", "/%25zz"},
		{"percent with one hex digit", "/%4", "/%254"},
		{"nested escape is not decoded twice", "/%%32e", "/%252e"},
		{"sub-delims, colon and at sign", "/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,="},
		{"unreserved", "/~user/a-b_c.d", "/~user/a-b_c.d"},
		{"encoded tilde", "/%7Euser", "/~user"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := spec.NormalizePath(c.in); got != c.want {
				t.Errorf("NormalizePath(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestNormalizePathForm: whatever the input, the result is in normal form
// and normalising it again changes nothing.
func TestNormalizePathForm(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.StringMatching(`([/\\;.%]|%2[eEfF]|%[0-9a-fA-F]{0,2}|[a-zA-Z]|\.\.| |ü){0,16}`).Draw(t, "path")
		got := spec.NormalizePath(in)
		if again := spec.NormalizePath(got); again != got {
			t.Fatalf("NormalizePath(%q) = %q, then %q", in, got, again)
		}
		segs := strings.Split(got, "/")
		if segs[0] != "" {
			t.Fatalf("NormalizePath(%q) = %q: no leading slash", in, got)
		}
		for i, s := range segs[1:] {
			last := i == len(segs)-2
			if s == "." || s == ".." || (s == "" && !last) || strings.ContainsAny(s, `;\ `) {
				t.Fatalf("NormalizePath(%q) = %q: segment %q", in, got, s)
			}
		}
		// An unreserved character reads the same encoded.
		for i := 0; i < len(got); i++ {
			if c := got[i]; c == '~' || c == '-' || c == '_' || 'a' <= c && c <= 'z' {
				enc := got[:i] + fmt.Sprintf("%%%02x", c) + got[i+1:]
				if n := spec.NormalizePath(enc); n != got {
					t.Fatalf("NormalizePath(%q) = %q, want %q", enc, n, got)
				}
				break
			}
		}
	})
}

func TestNormalizePathAllocates(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { spec.NormalizePath("/api/orders/42") }); n != 0 {
		t.Errorf("a normal path: %v allocations", n)
	}
}

func TestTarget(t *testing.T) {
	d := &spec.Door{NormalizePath: true}
	for in, want := range map[string]string{
		"":                          "",
		"/login?next=//x/../y":      "/login?next=//x/../y", // the query is as sent
		"//login?next=/":            "/login?next=/",
		"/a/./b":                    "/a/b",
		"?q=1":                      "/?q=1",
		"/login;jsessionid=1?a=b;c": "/login?a=b;c",
	} {
		if got := d.Target(in); got != want {
			t.Errorf("Target(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (&spec.Door{}).Target("//login"); got != "//login" {
		t.Errorf("normalize_path false: %q", got)
	}
}

func TestPathActionOptions(t *testing.T) {
	for _, c := range []struct {
		action spec.Action
		path   string
		want   string
	}{
		{spec.Action{StripQuery: true}, "/a/?x=/B/", "/a/"},
		{spec.Action{StripTrailingSlash: true}, "/a/?x=/B/", "/a?x=/B/"},
		{spec.Action{StripTrailingSlash: true}, "/", "/"},
		{spec.Action{StripTrailingSlash: true}, "//", "/"},
		{spec.Action{StripTrailingSlash: true, StripQuery: true}, "/a/b//?x", "/a/b"},
		{spec.Action{Lowercase: true}, "/Login?Next=/A", "/login?Next=/A"},
		{spec.Action{Lowercase: true, StripTrailingSlash: true, StripQuery: true}, "/API/X/?q", "/api/x"},
	} {
		c.action.Kind, c.action.Key = spec.ActionPath, "path"
		d := &spec.Descriptor{Actions: []spec.Action{c.action}}
		if e, _ := d.Build(&spec.Attributes{Path: c.path}, nil); len(e) != 1 || e[0].Value != c.want {
			t.Errorf("%s on %q: %v, want %q", c.action.String(), c.path, e, c.want)
		}
	}
	host := &spec.Descriptor{Actions: []spec.Action{{Kind: spec.ActionHost, Key: "host", Lowercase: true}}}
	if e, _ := host.Build(&spec.Attributes{Host: "App.Example.COM"}, nil); len(e) != 1 || e[0].Value != "app.example.com" {
		t.Errorf("host: %v", e)
	}
}
