package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tokengate/tokengate/pkg/bucket"
)

var updateSchema = flag.Bool("update", false, "rewrite "+SchemaPath)

const repoRoot = "../.."

// TestSchemaFile: the checked-in schema is Schema's output.
func TestSchemaFile(t *testing.T) {
	want, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repoRoot, SchemaPath)
	got, err := os.ReadFile(path)
	if *updateSchema && !bytes.Equal(got, want) {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the code: go test ./pkg/policy -run TestSchemaFile -update (then the chart's copy: cd tools && go test ./chart -run TestValuesSchemaHoldsPolicySchema -update)", SchemaPath)
	}
}

// TestSchemaCoversFields: every field the parser reads has a schema entry
// and every entry is a field; Schema fails otherwise, and names the field.
func TestSchemaCoversFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields []string
		docs   map[string]fieldSchema
	}{
		{"top", topFields, topSchema},
		{"rule", ruleFields, ruleSchema},
		{"match entry", entryFields, entrySchema},
		{"current_limit", currentLimitFields, currentLimitSchema},
		{"limits entry", bandFields, bandSchema},
	} {
		var missing, extra []string
		for _, f := range tc.fields {
			if _, ok := tc.docs[f]; !ok {
				missing = append(missing, f)
			}
		}
		for f := range tc.docs {
			if !slices.Contains(tc.fields, f) {
				extra = append(extra, f)
			}
		}
		if missing != nil || extra != nil {
			t.Errorf("%s: fields without a schema entry %v, entries that are no field %v", tc.name, missing, extra)
		}
	}
	// And Schema itself refuses a field it cannot describe.
	_, err := objectSchema("", append(slices.Clone(ruleFields), "capacityy"), ruleSchema, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `"capacityy"`) {
		t.Errorf("a field without an entry: %v, want an error naming it", err)
	}
	if _, err := Schema(); err != nil {
		t.Error(err)
	}
}

// TestSchemaEnums: each enum value is one the parser reads.
func TestSchemaEnums(t *testing.T) {
	parse := map[string]func(string) error{
		"charge":         func(s string) error { _, err := ParseCharge(s); return err },
		"on_resize":      func(s string) error { _, err := bucket.ParseResizeMode(s); return err },
		"on_store_error": func(s string) error { _, err := ParseStoreErrorMode(s); return err },
	}
	for field, d := range ruleSchema {
		if d.enum == nil {
			continue
		}
		p := parse[field]
		if p == nil {
			t.Errorf("%s: an enum this test does not check", field)
			continue
		}
		for _, v := range d.enum {
			if err := p(v); err != nil {
				t.Errorf("%s: enum value %q: %v", field, v, err)
			}
		}
		if err := p("maybe"); err == nil {
			t.Errorf("%s: the parser reads %q", field, "maybe")
		}
	}
	re := regexp.MustCompile(unitPattern())
	for _, u := range units {
		for _, s := range []string{u.name, strings.ToUpper(u.name), strings.ToUpper(u.name[:1]) + u.name[1:]} {
			if _, err := ParseUnit(s); err != nil || !re.MatchString(s) {
				t.Errorf("unit %q: parser %v, pattern %v", s, err, re.MatchString(s))
			}
		}
	}
	if re.MatchString("fortnight") {
		t.Error("unit pattern accepts fortnight")
	}
}

// TestSchemaRatePattern: every rate the parser accepts matches RatePattern
// (a refused valid rate is the worse mistake), and the plainly malformed
// ones do not.
func TestSchemaRatePattern(t *testing.T) {
	re := regexp.MustCompile(RatePattern)
	var periods []string
	for _, w := range []string{"second", "sec", "minute", "min", "hour", "day"} {
		for _, s := range []string{w, w + "s", strings.ToUpper(w), strings.ToUpper(w) + "S", strings.ToUpper(w[:1]) + w[1:] + "s"} {
			periods = append(periods, s, "2"+s, "10"+s)
		}
	}
	for _, u := range []string{"ns", "us", "µs", "μs", "ms", "s", "m", "h", "d"} {
		periods = append(periods, u, "3"+u, "1500"+u, "0"+u)
	}
	periods = append(periods, "1h30m", "1m30s", "1.5s", ".5s", "1.s", "h30m", "2h45m10s", "1.5h", "366d", "367d", "8784h",
		"S", "M", "H", "D", "x", "", "1", "5", "1d12h", "1.5d", "2 days", "-1s", "+1s", "s1", "1e3s", "weeks", "2weeks", "secss", "mins ")
	var tokens = []string{"1", "10", "+10", "010", "1000000000000", "1000000000001", "0", "-1", "0.5", "1e3", "", "x", "1_000"}
	accepted := 0
	for _, n := range tokens {
		for _, p := range periods {
			for _, s := range []string{n + "/" + p, " " + n + " / " + p + " "} {
				_, err := bucket.ParseRate(s)
				match := re.MatchString(s)
				if err == nil {
					accepted++
					if !match {
						t.Errorf("%q: the parser accepts it, the pattern refuses it", s)
					}
				}
			}
		}
	}
	if accepted < 200 {
		t.Fatalf("only %d rates accepted: the table is broken", accepted)
	}
	for _, s := range []string{"10/s", "7/3s", "1/2days", "10/minute", "10/min", "10/sec", "600/m", "5000/h", "1/d", "1/1500ms", "10/Seconds"} {
		if !re.MatchString(s) {
			t.Errorf("documented rate %q refused", s)
		}
	}
	for _, s := range []string{"10", "10/", "/s", "0.5/s", "10/x", "10/fortnight", "0/s", "-1/s", "10/S", "ten/s", "10/1d12h", "10/2 days", "10/s/s"} {
		if re.MatchString(s) {
			t.Errorf("%q: the pattern accepts it", s)
		}
		if _, err := bucket.ParseRate(s); err == nil {
			t.Errorf("%q: the parser accepts it; the table is wrong", s)
		}
	}
}

// schemaSamples are policies that validate: the repository's examples and
// the built-in default.
func schemaSamples(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "config", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join(repoRoot, "config", "default.yaml"))
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = data
	}
	// The first policy docs/policy.md shows (TestExplainInDocs' too).
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```\n")
	out["docs/policy.md"] = []byte(block)
	if len(out) < 5 {
		t.Fatalf("%d samples", len(out))
	}
	return out
}

// TestSchemaSamples: every valid sample passes the schema.
func TestSchemaSamples(t *testing.T) {
	schema := loadSchema(t)
	for name, data := range schemaSamples(t) {
		if _, err := Parse(name, data); err != nil {
			t.Errorf("%s: not a valid policy: %v", name, err)
			continue
		}
		if errs := schemaCheck(t, schema, yamlValue(t, data)); errs != nil {
			t.Errorf("%s: the schema refuses a valid policy:\n%s", name, strings.Join(errs, "\n"))
		}
	}
}

// TestSchemaRefuses: typos and bad values are flagged, each at its path.
func TestSchemaRefuses(t *testing.T) {
	schema := loadSchema(t)
	for _, tc := range []struct {
		name, policy string
		want         []string
	}{
		{"capacityy and maybe", `
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacityy: 100
      refill: 10/s
      on_store_error: maybe
`, []string{"/domains/edge/0/capacityy: not allowed", `/domains/edge/0/on_store_error: "maybe" is not one of`}},
		{"entry and top typos", `
domain: x
domains:
  edge:
    - name: a
      match: [{kye: user_id}]
      capacity: 1
      refill: 10/fortnight
      current_limit: {requests_per_unit: 10, unit: fortnight}
`, []string{"/domain: not allowed", "/domains/edge/0/match/0/kye: not allowed", "/domains/edge/0/match/0: key is missing",
			"/domains/edge/0/refill: \"10/fortnight\" does not match", "/domains/edge/0/current_limit/unit"}},
		{"types", `
revision: three
domains:
  edge:
    - match: {key: user_id}
      capacity: "100"
      shadow: yes please
`, []string{"/revision: want integer", "/domains/edge/0: name is missing", "/domains/edge/0/match: want array",
			"/domains/edge/0/capacity: want integer", "/domains/edge/0/shadow: want boolean"}},
		{"no domains", "revision: 1\n", []string{": domains is missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(tc.policy)); err == nil {
				t.Fatal("tokengate accepts the policy: the case is wrong")
			}
			errs := schemaCheck(t, schema, yamlValue(t, []byte(tc.policy)))
			got := strings.Join(errs, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in:\n%s", w, got)
				}
			}
		})
	}
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, SchemaPath))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlValue decodes a policy as an editor's YAML language server sees it.
func yamlValue(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// schemaCheck validates v against schema s, for only the keywords Schema
// emits (it fails the test on any other), and returns the problems as
// "path: what", sorted.
func schemaCheck(t *testing.T, s map[string]any, v any) []string {
	t.Helper()
	var errs []string
	var check func(s map[string]any, v any, path string)
	check = func(s map[string]any, v any, path string) {
		for k := range s {
			switch k {
			case "$schema", "title", "description", "type", "enum", "pattern", "properties", "additionalProperties", "required", "items":
			default:
				t.Fatalf("%s: keyword %q the checker does not know", path, k)
			}
		}
		fail := func(format string, args ...any) {
			errs = append(errs, path+": "+fmt.Sprintf(format, args...))
		}
		if typ, ok := s["type"]; ok {
			var types []string
			switch typ := typ.(type) {
			case string:
				types = []string{typ}
			case []any:
				for _, x := range typ {
					types = append(types, x.(string))
				}
			}
			if !slices.ContainsFunc(types, func(ty string) bool { return isType(ty, v) }) {
				fail("want %s, got %T", strings.Join(types, " or "), v)
				return
			}
		}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
			fail("%q is not one of %v", v, enum)
		}
		if p, ok := s["pattern"].(string); ok {
			if str, isStr := v.(string); isStr && !regexp.MustCompile(p).MatchString(str) {
				fail("%q does not match %s", str, p)
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			if list, isList := v.([]any); isList {
				for i, x := range list {
					check(items, x, fmt.Sprintf("%s/%d", path, i))
				}
			}
		}
		m, isMap := v.(map[string]any)
		if !isMap {
			return
		}
		for _, r := range asList(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				fail("%s is missing", r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k]; ok {
				check(p.(map[string]any), m[k], path+"/"+k)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					errs = append(errs, path+"/"+k+": not allowed")
				}
			case map[string]any:
				check(ap, m[k], path+"/"+k)
			}
		}
	}
	check(s, v, "")
	sort.Strings(errs)
	return errs
}

func asList(v any) []any { l, _ := v.([]any); return l }

// isType reports whether a value decoded from YAML is of JSON type ty.
func isType(ty string, v any) bool {
	switch ty {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "integer":
		switch x := v.(type) {
		case int, int64, uint64:
			return true
		case float64:
			return x == math.Trunc(x)
		}
	case "number":
		switch v.(type) {
		case int, int64, uint64, float64:
			return true
		}
	}
	return false
}

// TestSchemaInDocs: docs/policy.md's modeline names the schema by a path
// that resolves from docs/.
func TestSchemaInDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	const line = "# yaml-language-server: $schema="
	_, rest, ok := strings.Cut(string(doc), line)
	if !ok {
		t.Fatalf("docs/policy.md has no %q line", line)
	}
	rel, _, _ := strings.Cut(rest, "\n")
	if got, want := filepath.Clean(filepath.Join("docs", rel)), filepath.FromSlash(SchemaPath); got != want {
		t.Errorf("docs/policy.md: $schema=%s is %s from the root, want %s", rel, got, want)
	}
}
