package policy

import (
	"errors"
	"strings"
)

// Entry is one entry of a rate-limit descriptor, as Envoy sends it.
type Entry struct {
	Key, Value string
}

// MatchKind says how a Pattern compares a descriptor value.
type MatchKind uint8

const (
	// MatchAny matches every value: the rule keeps one bucket per value.
	MatchAny MatchKind = iota
	// MatchExact matches one value.
	MatchExact
	// MatchPrefix matches every value that starts with Value.
	MatchPrefix
	// MatchGlob matches the values that Value, a pattern with a "*"
	// before its end, accepts: each "*" stands for any run of bytes, the
	// empty one included, as envoyproxy/ratelimit's wildcards do
	// ("a*b*c" accepts "abc" and "a-b--c").
	MatchGlob
)

// Pattern is one entry of a rule's match list: the descriptor entry at the
// same position must have this Key and a value the pattern accepts.
type Pattern struct {
	Key   string
	Value string // the exact value, the prefix or the glob; "" for MatchAny
	Kind  MatchKind
	// Shared: every value the pattern accepts shares one bucket (the
	// reference's share_threshold); the bucket key holds the pattern as
	// written instead of the value. Only for patterns that accept more
	// than one value.
	Shared bool
	// Metric: the descriptor's value at this position is part of the
	// descriptor label of tokengate_descriptor_decisions_total (the
	// reference's detailed_metric and value_to_metric).
	Metric bool
}

// parsePattern reads a match entry: no value is any value, "v" is exact,
// "v*" is a prefix, "*" alone is any value and a value with a "*" before
// its end is a glob.
func parsePattern(key, value string, hasValue bool) (Pattern, error) {
	if !hasValue || value == "*" {
		return Pattern{Key: key, Kind: MatchAny}, nil
	}
	if value == "" {
		return Pattern{}, errors.New(`empty value; omit "value" to match any value`)
	}
	prefix, isPrefix := strings.CutSuffix(value, "*")
	switch {
	case strings.Contains(prefix, "*"):
		return Pattern{Key: key, Value: value, Kind: MatchGlob}, nil
	case isPrefix:
		return Pattern{Key: key, Value: prefix, Kind: MatchPrefix}, nil
	}
	return Pattern{Key: key, Value: value, Kind: MatchExact}, nil
}

// Matches reports whether the pattern accepts value.
func (p Pattern) Matches(value string) bool {
	switch p.Kind {
	case MatchExact:
		return value == p.Value
	case MatchPrefix:
		return strings.HasPrefix(value, p.Value)
	case MatchGlob:
		return globMatch(p.Value, value)
	}
	return true
}

// globMatch reports whether value matches glob, in which each "*" stands
// for any run of bytes. The literal parts are found leftmost first, which
// is exact for such globs: the first part anchors the start, the last the
// end, and a middle part found earlier leaves more room for the rest. It
// does not allocate.
func globMatch(glob, value string) bool {
	first, rest, _ := strings.Cut(glob, "*")
	if !strings.HasPrefix(value, first) {
		return false
	}
	value = value[len(first):]
	last := rest[strings.LastIndexByte(rest, '*')+1:]
	if len(value) < len(last) || !strings.HasSuffix(value, last) {
		return false
	}
	value = value[:len(value)-len(last)]
	rest = rest[:len(rest)-len(last)]
	for rest != "" {
		var part string
		part, rest, _ = strings.Cut(rest, "*")
		i := strings.Index(value, part)
		if i < 0 {
			return false
		}
		value = value[i+len(part):]
	}
	return true
}

// literal is the part of the pattern's value that every accepted value
// starts with: the exact value, the prefix, or a glob's text before its
// first "*".
func (p Pattern) literal() string {
	if p.Kind == MatchGlob {
		return p.Value[:strings.IndexByte(p.Value, '*')]
	}
	return p.Value
}

// covers reports whether p accepts every value q accepts (same key). For
// a glob it answers yes only when q is the same glob: a warning about an
// unreachable rule may be missed, never given wrongly.
func (p Pattern) covers(q Pattern) bool {
	if p.Key != q.Key {
		return false
	}
	switch p.Kind {
	case MatchAny:
		return true
	case MatchPrefix:
		return q.Kind != MatchAny && strings.HasPrefix(q.literal(), p.Value)
	case MatchGlob:
		return q == p || (q.Kind == MatchExact && p.Matches(q.Value))
	}
	return q.Kind == MatchExact && q.Value == p.Value
}

// String is the pattern as written in the file: "key", "key=value",
// "key=prefix*" or "key=gl*ob".
func (p Pattern) String() string {
	if p.Kind == MatchAny {
		return p.Key
	}
	return p.Key + "=" + p.written()
}

// written is the value as the file wrote it: "*" for any value.
func (p Pattern) written() string {
	switch p.Kind {
	case MatchAny:
		return "*"
	case MatchPrefix:
		return p.Value + "*"
	}
	return p.Value
}
