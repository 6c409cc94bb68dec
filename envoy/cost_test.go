package envoy_test

// Who chooses a request's cost. A header that becomes a cost (a
// hits_addend format's %REQ(h)%, or a header ext_authz forwards and a
// shipped policy's front door reads as hits_addend) must not be the
// client's: a client sending x-cost: 0 is only checked, never charged, and
// its per-user limit stops applying. So every shipped Envoy configuration
// replaces (OVERWRITE_IF_EXISTS_OR_ADD) or removes such a header in an
// early header mutation, which runs before route selection and every HTTP
// filter: only a filter the operator places before the rate limit filter
// can set it then. ADD_IF_ABSENT, or appending (Envoy's default action),
// keeps the client's value.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"

	"github.com/tokengate/tokengate/pkg/policy"
)

// reqHeader finds the header of %REQ(name)% or %REQ(name):N% in a format.
var reqHeader = regexp.MustCompile(`%REQ\(([^):]+)\)`)

// TestClientsCannotChooseTheirCost: every Envoy bootstrap shipped (here
// and in examples/sidecar) overwrites or removes each header it reads as
// a cost before its filters run, and no shipped configuration (Kubernetes
// resources included) sets such a header in a way that keeps the client's.
func TestClientsCannotChooseTheirCost(t *testing.T) {
	fromPolicies := policyCostHeaders(t)
	if !fromPolicies["x-cost"] {
		t.Fatalf("no shipped policy reads a cost header (found %v): this test would check nothing", fromPolicies)
	}
	bootstraps := 0
	for _, c := range shippedEnvoyConfigs(t) {
		for _, p := range keptCostHeaders(c.name, c.doc, fromPolicies) {
			t.Error(p)
		}
		if c.bootstrap {
			b, _ := loadBootstrap(t, c.name, c.doc)
			for _, p := range unprotectedCostHeaders(t, c.name, b, fromPolicies) {
				t.Error(p)
			}
			bootstraps++
		}
	}
	if bootstraps < 3 {
		t.Fatalf("checked %d bootstraps; want envoy.yaml, ext_authz.yaml and the sidecar's at least", bootstraps)
	}
}

// TestCostCheckRefusesAddIfAbsent: the check above fails envoy.yaml as it
// was (x-cost defaulted with ADD_IF_ABSENT), and each bootstrap without
// its mutation.
func TestCostCheckRefusesAddIfAbsent(t *testing.T) {
	fromPolicies := policyCostHeaders(t)
	cases := []struct {
		file, old, new string
		want           string
	}{
		{"envoy.yaml", "append_action: OVERWRITE_IF_EXISTS_OR_ADD", "append_action: ADD_IF_ABSENT",
			`envoy.yaml: x-cost is read as a cost (hits_addend %REQ(x-cost)%) and a client's own x-cost is kept (early header mutations: ADD_IF_ABSENT)`},
		{"envoy.yaml", "append_action: OVERWRITE_IF_EXISTS_OR_ADD", "append_action: APPEND_IF_EXISTS_OR_ADD",
			`(early header mutations: APPEND_IF_EXISTS_OR_ADD)`},
		{"envoy.yaml", "                            append_action: OVERWRITE_IF_EXISTS_OR_ADD\n", "",
			`(early header mutations: APPEND_IF_EXISTS_OR_ADD)`}, // Envoy's default
		{"ext_authz.yaml", "- remove: x-cost", "- remove: x-other",
			`ext_authz.yaml: x-cost is read as a cost (ext_authz forwards it to a front door that reads it as hits_addend) and a client's own x-cost is kept (early header mutations: none)`},
	}
	for _, c := range cases {
		t.Run(c.file+" "+c.new, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(c.old)) {
				t.Fatalf("%s has no %q", c.file, c.old)
			}
			docs := decodeDocs(t, c.file, bytes.Replace(data, []byte(c.old), []byte(c.new), 1))
			b, _ := loadBootstrap(t, c.file, docs[0])
			problems := unprotectedCostHeaders(t, c.file, b, fromPolicies)
			if len(problems) != 1 || !strings.Contains(problems[0], c.want) {
				t.Fatalf("problems %q, want one saying %q", problems, c.want)
			}
			if strings.Contains(c.new, "ADD_IF_ABSENT") {
				if kept := keptCostHeaders(c.file, docs[0], fromPolicies); len(kept) != 1 || !strings.Contains(kept[0], "ADD_IF_ABSENT") {
					t.Fatalf("the plain scan found %q", kept)
				}
			}
		})
	}
}

// envoyConfig is one YAML document holding Envoy configuration.
type envoyConfig struct {
	name      string
	doc       map[string]any
	bootstrap bool // a whole bootstrap, not a Kubernetes resource
}

// shippedEnvoyConfigs are the documents of every YAML file under envoy/
// and examples/, plus the envoy.yaml inside a ConfigMap.
func shippedEnvoyConfigs(t *testing.T) []envoyConfig {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	more, _ := filepath.Glob(repoFile("examples", "*", "*.yaml"))
	var out []envoyConfig
	for _, f := range append(files, more...) {
		docs := yamlDocs(t, f)
		for _, doc := range docs {
			bootstrap := len(docs) == 1 && doc["kind"] == nil && doc["static_resources"] != nil
			out = append(out, envoyConfig{name: f, doc: doc, bootstrap: bootstrap})
			if doc["kind"] != "ConfigMap" {
				continue
			}
			data, _ := doc["data"].(map[string]any)
			if s, ok := data["envoy.yaml"].(string); ok {
				for _, inner := range decodeDocs(t, f+" envoy.yaml", []byte(s)) {
					out = append(out, envoyConfig{name: f + " envoy.yaml", doc: inner, bootstrap: true})
				}
			}
		}
	}
	return out
}

// policyCostHeaders are the headers any shipped policy's front door reads
// a cost from.
func policyCostHeaders(t *testing.T) map[string]bool {
	t.Helper()
	files, _ := filepath.Glob(repoFile("config", "*.yaml"))
	for _, pattern := range [][]string{{"config", "examples", "*.yaml"}, {"examples", "*", "policy.yaml"}} {
		more, _ := filepath.Glob(repoFile(pattern...))
		files = append(files, more...)
	}
	out := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse(f, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range p.FrontDoors() {
			for _, name := range fd.Domains() {
				for _, d := range fd.Domain(name).Descriptors {
					if d.HitsAddendHeader != "" {
						out[d.HitsAddendHeader] = true
					}
				}
			}
		}
	}
	return out
}

// unprotectedCostHeaders lists, for each HTTP connection manager of b, the
// headers it reads as a cost that a client could still choose.
func unprotectedCostHeaders(t *testing.T, name string, b *bootstrapv3.Bootstrap, fromPolicies map[string]bool) []string {
	t.Helper()
	var problems []string
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if !strings.HasSuffix(f.GetTypedConfig().GetTypeUrl(), ".HttpConnectionManager") {
					continue
				}
				hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				read := costHeadersRead(t, hcm, fromPolicies)
				headers := make([]string, 0, len(read))
				for h := range read {
					headers = append(headers, h)
				}
				slices.Sort(headers)
				for _, h := range headers {
					if kept, actions := clientValueKept(t, hcm, h); kept {
						problems = append(problems, fmt.Sprintf("%s: %s is read as a cost (%s) and a client's own %s is kept (early header mutations: %s): overwrite it with OVERWRITE_IF_EXISTS_OR_ADD or remove it in early_header_mutation_extensions",
							name, h, read[h], h, actions))
					}
				}
			}
		}
	}
	return problems
}

// costHeadersRead are the headers an HTTP connection manager's filters
// read as a cost, with where each is read.
func costHeadersRead(t *testing.T, hcm *hcmv3.HttpConnectionManager, fromPolicies map[string]bool) map[string]string {
	t.Helper()
	read := map[string]string{}
	for _, hf := range hcm.GetHttpFilters() {
		switch hf.GetName() {
		case rateLimitFilter:
			filter := unpack[*ratelimitv3.RateLimit](t, hf.GetTypedConfig())
			for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
				for _, d := range virtualHostDescriptors(t, filter, vh) {
					for _, m := range reqHeader.FindAllStringSubmatch(d.cost, -1) {
						read[strings.ToLower(m[1])] = "hits_addend " + d.cost
					}
				}
			}
		case "envoy.filters.http.ext_authz":
			ea := unpack[*extauthzv3.ExtAuthz](t, hf.GetTypedConfig())
			for h := range fromPolicies {
				if forwards(ea, h) {
					read[h] = "ext_authz forwards it to a front door that reads it as hits_addend"
				}
			}
		}
	}
	return read
}

// forwards reports whether the ext_authz filter sends header h in its
// CheckRequest: every header when allowed_headers is unset.
func forwards(ea *extauthzv3.ExtAuthz, h string) bool {
	allowed := ea.GetAllowedHeaders()
	if allowed == nil {
		return true
	}
	for _, p := range allowed.GetPatterns() {
		switch {
		case strings.EqualFold(p.GetExact(), h),
			p.GetPrefix() != "" && strings.HasPrefix(h, strings.ToLower(p.GetPrefix())),
			p.GetSafeRegex() != nil, p.GetContains() != "" && strings.Contains(h, strings.ToLower(p.GetContains())):
			return true
		}
	}
	return false
}

// clientValueKept runs the early header mutations over a request that
// carries its own header h: kept is whether a client's value survives
// them, and actions lists what they do to h.
func clientValueKept(t *testing.T, hcm *hcmv3.HttpConnectionManager, h string) (kept bool, actions string) {
	t.Helper()
	kept = true
	var seen []string
	for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
		hm := unpack[*headermutationv3.HeaderMutation](t, ext.GetTypedConfig())
		for _, m := range hm.GetMutations() {
			if strings.EqualFold(m.GetRemove(), h) {
				kept = false
				seen = append(seen, "remove")
			}
			a := m.GetAppend()
			if a == nil || !strings.EqualFold(a.GetHeader().GetKey(), h) {
				continue
			}
			action := a.GetAppendAction()
			//lint:ignore SA1019 Envoy still reads the deprecated bool, and it decides when set
			if app := a.GetAppend(); app != nil {
				action = map[bool]corev3.HeaderValueOption_HeaderAppendAction{
					true: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, false: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
				}[app.GetValue()]
			}
			if action == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				kept = false
			}
			seen = append(seen, action.String())
		}
	}
	if len(seen) == 0 {
		return kept, "none"
	}
	return kept, strings.Join(seen, ", ")
}

// keptCostHeaders scans a YAML document as plain data for a header value
// option ({header: {key, value}, append_action}) on a cost header whose
// action keeps a client's value: the shape Envoy uses in every header
// mutation, route header addition and Kubernetes patch alike.
func keptCostHeaders(name string, doc map[string]any, fromPolicies map[string]bool) []string {
	costs := map[string]bool{}
	for h := range fromPolicies {
		costs[h] = true
	}
	walk(doc, func(m map[string]any) {
		if ha, ok := m["hits_addend"].(map[string]any); ok {
			if f, ok := ha["format"].(string); ok {
				for _, sub := range reqHeader.FindAllStringSubmatch(f, -1) {
					costs[strings.ToLower(sub[1])] = true
				}
			}
		}
	})
	var problems []string
	walk(doc, func(m map[string]any) {
		header, ok := m["header"].(map[string]any)
		if !ok {
			return
		}
		key, _ := header["key"].(string)
		if !costs[strings.ToLower(key)] {
			return
		}
		action, _ := m["append_action"].(string)
		if appendBool, ok := m["append"].(bool); ok && action == "" {
			action = map[bool]string{true: "APPEND_IF_EXISTS_OR_ADD", false: "OVERWRITE_IF_EXISTS_OR_ADD"}[appendBool]
		}
		if action == "" {
			action = "APPEND_IF_EXISTS_OR_ADD" // Envoy's default
		}
		if action != "OVERWRITE_IF_EXISTS_OR_ADD" {
			problems = append(problems, fmt.Sprintf("%s: cost header %s is set with %s, which keeps a client's own value: use OVERWRITE_IF_EXISTS_OR_ADD", name, key, action))
		}
	})
	return problems
}

// walk calls visit on every mapping in v, at any depth.
func walk(v any, visit func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		visit(v)
		for _, c := range v {
			walk(c, visit)
		}
	case []any:
		for _, c := range v {
			walk(c, visit)
		}
	}
}
