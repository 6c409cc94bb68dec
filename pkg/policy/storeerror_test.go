package policy

import (
	"strings"
	"testing"
)

// storeErrorNative names on_store_error on two rules of three.
const storeErrorNative = `domains:
  edge:
    - {name: unnamed, match: [{key: user_id}], capacity: 5, refill: 1/s}
    - {name: denies, match: [{key: path}], capacity: 5, refill: 1/s, on_store_error: deny}
    - {name: allows, match: [{key: tenant}], capacity: 5, refill: 1/s, on_store_error: allow}
`

// storeErrorReference is in envoyproxy/ratelimit's format, which has no
// on_store_error.
const storeErrorReference = `domain: ref
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 5}
`

// TestStoreErrorDefault: a rule that names no on_store_error gets its
// Compiler's default, local unless the Compiler says otherwise, in both
// formats; a rule that names one keeps it whatever the default.
func TestStoreErrorDefault(t *testing.T) {
	files := []File{{Name: "native.yaml", Data: []byte(storeErrorNative)}, {Name: "ref.yaml", Data: []byte(storeErrorReference)}}
	for _, tc := range []struct {
		name string
		def  *StoreErrorMode
		want StoreErrorMode // of the rules that name none
	}{
		{"built-in default", nil, StoreErrorLocal},
		{"deny", new(StoreErrorDeny), StoreErrorDeny},
		{"allow", new(StoreErrorAllow), StoreErrorAllow},
		{"local", new(StoreErrorLocal), StoreErrorLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := (&Compiler{OnStoreError: tc.def}).CompileFiles("dir", files, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				domain, rule string
				want         StoreErrorMode
			}{
				{"edge", "unnamed", tc.want},
				{"edge", "denies", StoreErrorDeny},
				{"edge", "allows", StoreErrorAllow},
			} {
				if got := p.Rule(c.domain, c.rule).OnStoreError; got != c.want {
					t.Errorf("%s/%s: on_store_error %v, want %v", c.domain, c.rule, got, c.want)
				}
			}
			var limited int
			for _, r := range p.Rules("ref") {
				if r.HasBucket() {
					limited++
					if r.OnStoreError != tc.want {
						t.Errorf("reference rule %s: on_store_error %v, want %v", r.Name, r.OnStoreError, tc.want)
					}
				}
			}
			if limited == 0 {
				t.Fatal("the reference file compiled to no limited rule")
			}
		})
	}
	if DefaultStoreErrorMode != StoreErrorLocal {
		t.Errorf("DefaultStoreErrorMode %v, want local", DefaultStoreErrorMode)
	}
}

// TestStoreErrorModeParse: the three modes round-trip through String; an
// empty or unknown one is refused, in the file too.
func TestStoreErrorModeParse(t *testing.T) {
	for _, m := range []StoreErrorMode{StoreErrorDeny, StoreErrorAllow, StoreErrorLocal} {
		if got, err := ParseStoreErrorMode(m.String()); err != nil || got != m {
			t.Errorf("%v: %v, %v", m, got, err)
		}
	}
	for _, s := range []string{"", "Local", "fail-open"} {
		if _, err := ParseStoreErrorMode(s); err == nil || !strings.Contains(err.Error(), "want deny, allow or local") {
			t.Errorf("%q: %v", s, err)
		}
	}
	_, err := Parse("p.yaml", []byte(`domains:
  edge:
    - {name: r, match: [{key: k}], capacity: 5, refill: 1/s, on_store_error: ""}
`))
	if err == nil || !strings.Contains(err.Error(), `p.yaml:3: domain "edge" rule "r": on_store_error: "": want deny, allow or local`) {
		t.Errorf("empty on_store_error: %v", err)
	}
}

// TestStoreErrorImport: NativeYAML writes every limited rule's
// on_store_error, so the written policy answers alike under any default of
// the tokengate that reads it; ImportReport says what they answer.
func TestStoreErrorImport(t *testing.T) {
	files := []File{{Name: "ref.yaml", Data: []byte(storeErrorReference)}}
	for _, mode := range []StoreErrorMode{StoreErrorLocal, StoreErrorDeny} {
		t.Run(mode.String(), func(t *testing.T) {
			ref, err := (&Compiler{OnStoreError: new(mode)}).CompileFiles("ref", files, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ref.NativeYAML()
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(out), "on_store_error: "+mode.String()); n != 1 {
				t.Fatalf("on_store_error: %s written %d times, want once:\n%s", mode, n, out)
			}
			other := StoreErrorAllow
			native, err := (&Compiler{OnStoreError: &other}).Compile("native.yaml", out, nil, 0)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := native.Rule("ref", "user_id").OnStoreError; got != mode {
				t.Errorf("read back under default allow: %v, want %v", got, mode)
			}
			want := "the rule's on_store_error answers, marked degraded (written on every rule: " + mode.String() + " on 1 rule)"
			found := false
			for _, line := range ref.ImportReport() {
				found = found || strings.Contains(line, want)
			}
			if !found {
				t.Errorf("report lacks %q:\n%s", want, strings.Join(ref.ImportReport(), "\n"))
			}
		})
	}
}
