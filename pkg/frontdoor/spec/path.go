package spec

// Path normalisation. Every value of a descriptor is part of its bucket
// key, so every spelling of a path that a backend serves as one resource
// must give one value, or a client picks a fresh bucket per spelling:
// //login, /./login, /%6cogin, /api/../login and /login;jsessionid=1 are
// all /login to a backend behind Envoy (normalize_path, merge_slashes) or
// a servlet container (path parameters). A door normalises the request's
// path once, before any descriptor reads it (Door.Target); what is left
// to a backend's taste (a trailing slash, case) is per action
// (Action.StripTrailingSlash, Action.Lowercase).

import (
	"bytes"
	"strings"
)

// NormalizePath returns the normal form of a request path (without its
// query), as Envoy's normalize_path and merge_slashes would, and without
// the path parameters servlet containers ignore:
//
//   - "\" separates segments, as "/" does (Envoy, after Chromium's URL
//     canonicaliser);
//   - a percent-encoded unreserved character (ALPHA, DIGIT, "-", ".", "_",
//     "~") is decoded: %6c is l, %2e is "."; every other escape is kept,
//     with upper-case hex digits, so %2f is %2F and never a "/" (as Envoy's
//     default path_with_escaped_slashes_action, KEEP_UNCHANGED);
//   - a "%" that starts no escape is written %25, and bytes RFC 3986 does
//     not allow in a path (space, controls, non-ASCII, `"<>[]^{|}`, "#")
//     are percent-encoded, so that /a b and /a%20b are one path;
//   - the parameters of a segment, from ";" to the end of the segment, are
//     dropped, before dot segments are: /login;jsessionid=1 is /login,
//     and /a/..;/b is /b, as Tomcat reads it;
//   - runs of separators are one "/";
//   - dot segments are removed (RFC 3986 §5.2.4), %2e%2e too: /a/./b is
//     /a/b, /a/b/../c is /a/c, and ".." at the root stays there (/../a is
//     /a);
//   - the result starts with "/": "" is "/", a/b is /a/b.
//
// A trailing "/" is kept (/a/ stays /a/, /a/b/.. is /a/), and so is case.
// NormalizePath is idempotent, and it allocates only when the path is not
// normal already.
func NormalizePath(p string) string {
	if isNormalPath(p) {
		return p
	}
	out := make([]byte, 1, len(p)+8)
	out[0] = '/' // out ends with "/" between segments
	named := false
	for rest, more := p, true; more; {
		var seg string
		if i := strings.IndexAny(rest, `/\`); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			seg, more = rest, false
		}
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		mark := len(out)
		out = appendSegment(out, seg)
		switch string(out[mark:]) {
		case "", ".":
			out, named = out[:mark], false
		case "..":
			out, named = out[:mark], false
			if len(out) > 1 {
				out = out[:bytes.LastIndexByte(out[:len(out)-1], '/')+1]
			}
		default:
			out, named = append(out, '/'), true
		}
	}
	if named {
		out = out[:len(out)-1]
	}
	return string(out)
}

// isNormalPath reports whether NormalizePath would return p as it is:
// it starts with "/", has only bytes that stand for themselves, and no
// empty or dot segment but a last empty one.
func isNormalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '/':
			next := p[i+1:]
			if strings.HasPrefix(next, "/") || next == "." || next == ".." ||
				strings.HasPrefix(next, "./") || strings.HasPrefix(next, "../") {
				return false
			}
		case pathByte[c] == escaped:
			return false
		}
	}
	return true
}

// appendSegment appends one segment's bytes in normal form.
func appendSegment(out []byte, seg string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]):
			v := unhex(seg[i+1])<<4 | unhex(seg[i+2])
			if pathByte[v] == unreserved {
				out = append(out, v)
			} else {
				out = append(out, '%', hex[v>>4], hex[v&15])
			}
			i += 2
		case pathByte[c] != escaped:
			out = append(out, c)
		default:
			out = append(out, '%', hex[c>>4], hex[c&15])
		}
	}
	return out
}

// How a byte appears in a normal path.
const (
	escaped    = iota // percent-encoded
	unreserved        // as is, and decoded when percent-encoded
	literal           // as is, and left encoded (sub-delims but ";", ":", "@": %2B need not mean +)
)

var pathByte = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = unreserved, unreserved
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = unreserved
	}
	for _, c := range "-._~" {
		t[c] = unreserved
	}
	for _, c := range "!$&'()*+,=:@" {
		t[c] = literal
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// Target returns the request target (path and query) as the door's
// descriptors read it: the path normalised by NormalizePath, the query
// as sent. It returns raw as it is when the door's normalize_path is false
// or raw is "" (a request without a path: descriptors that read it are
// skipped).
func (d *Door) Target(raw string) string {
	if !d.NormalizePath || raw == "" {
		return raw
	}
	path, query, hasQuery := strings.Cut(raw, "?")
	norm := NormalizePath(path)
	switch {
	case norm == path:
		return raw
	case !hasQuery:
		return norm
	}
	return norm + "?" + query
}
