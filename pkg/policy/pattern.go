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
)

// Pattern is one entry of a rule's match list: the descriptor entry at the
// same position must have this Key and a value the pattern accepts.
type Pattern struct {
	Key   string
	Value string // the exact value or the prefix; "" for MatchAny
	Kind  MatchKind
}

var errStar = errors.New(`"*" is only allowed at the end of a value (a prefix match)`)

// parsePattern reads a match entry: no value is any value, "v" is exact,
// "v*" is a prefix and "*" alone is any value.
func parsePattern(key, value string, hasValue bool) (Pattern, error) {
	if !hasValue || value == "*" {
		return Pattern{Key: key, Kind: MatchAny}, nil
	}
	if value == "" {
		return Pattern{}, errors.New(`empty value; omit "value" to match any value`)
	}
	prefix, isPrefix := strings.CutSuffix(value, "*")
	if strings.Contains(prefix, "*") {
		return Pattern{}, errStar
	}
	if isPrefix {
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
	}
	return true
}

// covers reports whether p accepts every value q accepts (same key).
func (p Pattern) covers(q Pattern) bool {
	if p.Key != q.Key {
		return false
	}
	switch p.Kind {
	case MatchAny:
		return true
	case MatchPrefix:
		return q.Kind != MatchAny && strings.HasPrefix(q.Value, p.Value)
	}
	return q.Kind == MatchExact && q.Value == p.Value
}

// String is the pattern as written in the file: "key", "key=value" or
// "key=prefix*".
func (p Pattern) String() string {
	switch p.Kind {
	case MatchExact:
		return p.Key + "=" + p.Value
	case MatchPrefix:
		return p.Key + "=" + p.Value + "*"
	}
	return p.Key
}
