package policy

// A JSON Schema of the native policy file, for editors (the YAML language
// server completes and checks fields with it: docs/policy.md). It is built
// from the parser's own field tables (topFields, ruleFields, entryFields,
// currentLimitFields) and the per-field table below, so a field the parser
// reads but the schema does not describe fails TestSchemaCoversFields; the
// checked-in config/policy.schema.json is Schema's output
// (TestSchemaFile, -update rewrites it).
//
// The schema checks shapes, names, enums and the refill syntax. What needs
// the rule as a whole (capacity required unless unlimited, cost within
// capacity, current_limit equal to the refill rate, ...) is `tokengate
// validate`'s.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// SchemaPath is where the generated schema is checked in, relative to the
// repository's root.
const SchemaPath = "config/policy.schema.json"

// fieldSchema is one field's entry in the schema: what a value may be.
type fieldSchema struct {
	typ     []string // JSON types; one or more
	enum    []string
	pattern string
	desc    string
	// sub is the schema of a structured value (a list's items, a
	// mapping's fields), built when the schema is.
	sub func() (map[string]any, error)
}

// The JSON types a scalar read with text or identifier may be: YAML reads
// `value: 200` as a number, and tokengate takes it as the text "200".
var (
	scalarTypes   = []string{"string", "number", "boolean"}
	nullableTypes = []string{"string", "number", "boolean", "null"}
)

var topSchema = map[string]fieldSchema{
	"revision":       {typ: []string{"integer"}, desc: "Optional; raise it on every edit (0 or more). Shown by `tokengate validate` and in metrics."},
	"request_id_key": {typ: scalarTypes, desc: "Optional: a descriptor with only this key carries the request id and matches no rule."},
	"domains": {typ: []string{"object"}, desc: "Domain names (the Envoy rate_limit filter's `domain`) to their lists of rules; the first matching rule wins.",
		sub: func() (map[string]any, error) {
			rule, err := objectSchema("A rule: which descriptors it matches and the bucket that limits them.", ruleFields, ruleSchema, []string{"name", "match"}, bucketFields)
			if err != nil {
				return nil, err
			}
			return map[string]any{"additionalProperties": map[string]any{
				"type":        "array",
				"description": "The domain's rules, in order.",
				"items":       rule,
			}}, nil
		}},
	"front_doors": {typ: []string{"object"}, desc: "How requests that arrive without descriptors (ext_authz, forward-auth) become descriptors: docs/front-doors.md. This schema does not describe its fields; `tokengate validate` checks them."},
}

const refillDesc = "N/unit or N/duration: 10/s, 600/m, 600/minute, 5000/h, 1/d, 1/1500ms, 7/3s, 1/2days. N is whole: half a token a second is 1/2s."

var ruleSchema = map[string]fieldSchema{
	"name": {typ: scalarTypes, desc: "Unique within the domain; shown in metrics and current_limit."},
	"match": {typ: []string{"array"}, desc: "The descriptor's entries, in order: a descriptor matches when it has exactly these keys, in this order, with accepted values.",
		sub: func() (map[string]any, error) {
			entry, err := objectSchema("A match entry: a key and, optionally, a value.", entryFields, entrySchema, []string{"key"}, nil)
			return map[string]any{"items": entry}, err
		}},
	"capacity":       {typ: []string{"integer"}, desc: "The burst, in tokens; required unless unlimited or not_limited. 0: the rule denies everything."},
	"refill":         {typ: []string{"string"}, pattern: RatePattern, desc: refillDesc},
	"cost":           {typ: []string{"integer"}, desc: "Tokens per request when Envoy sends no hits_addend (default 1)."},
	"max_cost":       {typ: []string{"integer"}, desc: "Larger requests are refused (default: capacity)."},
	"charge":         {typ: []string{"string"}, enum: []string{BeforeRequest.String(), AfterResponse.String(), EveryHit.String()}, desc: "When a request is charged: before_request (pre-paid, the default), after_response (post-paid: docs/policy.md, \"Token budgets for LLM traffic\") or every_hit (every cost charged, refused or not, as envoyproxy/ratelimit counts: docs/policy.md, \"Charging every hit\")."},
	"max_debt":       {typ: []string{"integer"}, desc: "With charge: after_response or every_hit, how far below zero a charge may take the bucket (default: capacity)."},
	"reserve":        {typ: []string{"integer"}, desc: "With charge: after_response and the policy's request_id_key, the tokens a check holds for its request id until the report with the same id settles them (1 to capacity)."},
	"reserve_ttl":    {typ: []string{"string"}, pattern: reserveTTLPattern, desc: "With reserve, how long a reservation waits for its report before it is returned: a duration such as 30s, 10m (the default), 1h; at most 24h."},
	"on_resize":      {typ: []string{"string"}, enum: []string{bucket.Clamp.String(), bucket.Scale.String()}, desc: "What a capacity change does to a live balance: clamp (the default) or scale."},
	"on_store_error": {typ: []string{"string"}, enum: []string{StoreErrorDeny.String(), StoreErrorAllow.String(), StoreErrorLocal.String()}, desc: "The answer when the shared store fails or stalls: local (the default: a bounded budget per replica), deny or allow."},
	"shadow":         {typ: []string{"boolean"}, desc: "true: decide and count, but always answer OK."},
	"unlimited":      {typ: []string{"boolean"}, desc: "true: always OK, no bucket."},
	"not_limited":    {typ: []string{"boolean"}, desc: "true: the descriptor matches this rule, and no later one, and is answered as if no rule matched."},
	"current_limit": {typ: []string{"object"}, desc: "What statuses report: requests_per_unit per unit must be the refill rate; name is the rule's limit name (default: the rule's name).",
		sub: func() (map[string]any, error) {
			return objectSchema("", currentLimitFields, currentLimitSchema, nil, nil)
		}},
	"replaces": {typ: []string{"array"}, desc: "Limit names: a descriptor of the same request whose rule has one is answered as if no rule matched.",
		sub: func() (map[string]any, error) {
			return map[string]any{"items": map[string]any{"type": scalarTypes}}, nil
		}},
	"quota":  {typ: []string{"boolean"}, desc: "true: refuses a request only together with the request's other quota rules."},
	"limits": limitsSchema,
}

var entrySchema = map[string]fieldSchema{
	"key":     {typ: scalarTypes, desc: "The descriptor entry's key."},
	"value":   {typ: nullableTypes, desc: "Exact value, a prefix with a trailing *, or a glob with a * before the end; no value: any value, one bucket per distinct value."},
	"shared":  {typ: []string{"boolean"}, desc: "true: every value the entry accepts (a wildcard or no value) shares one bucket."},
	"literal": {typ: []string{"boolean"}, desc: "true: the value is compared as is, a * in it a plain character."},
	"metric":  {typ: []string{"boolean"}, desc: "true: the entry's value is part of the descriptor label of tokengate_descriptor_decisions_total."},
}

var currentLimitSchema = map[string]fieldSchema{
	"requests_per_unit": {typ: []string{"integer"}, desc: "Requests per unit, 0 to 4294967295; with unit, or neither."},
	"unit":              {typ: []string{"string"}, pattern: unitPattern(), desc: "second, minute, hour, day, week, month (30 days) or year (365), in any case."},
	"name":              {typ: nullableTypes, desc: "The rule's limit name, which other rules' replaces name (default: the rule's name)."},
}

// RatePattern is an ECMA-262 (and Go) regular expression that every rate
// bucket.ParseRate accepts matches: N/unit or N/duration, with spaces
// around the slash and the whole. It is looser than the parser where only
// arithmetic decides (a period longer than a year, 0 of a word), never
// stricter: TestSchemaRatePattern checks it against the parser.
var RatePattern = func() string {
	words := make([]string, 0, 6)
	for _, w := range []string{"second", "sec", "minute", "min", "hour", "day"} {
		words = append(words, caseless(w))
	}
	unit := `(?:ns|us|µs|μs|ms|s|m|h)`
	duration := `[0-9]*(?:\.[0-9]*)?` + unit + `(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)` + unit + `)*`
	return `^\s*\+?0*[1-9][0-9]*\s*/\s*(?:[0-9]*(?:` + strings.Join(words, "|") + `)[sS]?|[0-9]*d|` + duration + `)\s*$`
}()

// unitPattern accepts the units ParseUnit reads, in any case.
func unitPattern() string {
	names := make([]string, 0, len(units))
	for _, u := range units {
		names = append(names, caseless(u.name))
	}
	return `^(?:` + strings.Join(names, "|") + `)$`
}

// caseless spells a lower-case word as a pattern of any case ("ab":
// "[aA][bB]"): ECMA-262 patterns have no (?i).
func caseless(w string) string {
	var b strings.Builder
	for _, c := range w {
		fmt.Fprintf(&b, "[%c%c]", c, c-'a'+'A')
	}
	return b.String()
}

// objectSchema is the schema of a mapping with the given fields, each
// described by docs, and no other; a field in bucketOnly is said to need a
// bucket.
func objectSchema(desc string, fields []string, docs map[string]fieldSchema, required, bucketOnly []string) (map[string]any, error) {
	props := make(map[string]any, len(fields))
	for _, f := range fields {
		d, ok := docs[f]
		if !ok {
			return nil, fmt.Errorf("field %q has no schema entry", f)
		}
		p := map[string]any{"description": d.desc}
		if slices.Contains(bucketOnly, f) {
			p["description"] = d.desc + " Not on an unlimited or not_limited rule."
		}
		if len(d.typ) == 1 {
			p["type"] = d.typ[0]
		} else {
			p["type"] = d.typ
		}
		if d.enum != nil {
			p["enum"] = d.enum
		}
		if d.pattern != "" {
			p["pattern"] = d.pattern
		}
		if d.sub != nil {
			sub, err := d.sub()
			if err != nil {
				return nil, err
			}
			for k, v := range sub {
				p[k] = v
			}
		}
		props[f] = p
	}
	for f := range docs {
		if !slices.Contains(fields, f) {
			return nil, fmt.Errorf("schema entry %q is no field the parser reads", f)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if desc != "" {
		s["description"] = desc
	}
	if required != nil {
		s["required"] = required
	}
	return s, nil
}

// Schema returns the JSON Schema (draft-07) of the native policy file, as
// config/policy.schema.json holds it.
func Schema() ([]byte, error) {
	s, err := objectSchema("A tokengate policy file in the native format (docs/policy.md). "+
		"Checks fields, types, enums and the refill syntax; `tokengate validate` checks the rest. "+
		"front_doors is only an object here.", topFields, topSchema, []string{"domains"}, nil)
	if err != nil {
		return nil, err
	}
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["title"] = "tokengate policy"
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
