// Package monitoring_test checks the Prometheus alert rules and the Grafana
// dashboard that charts/tokengate/files holds (one copy, read by the
// chart's templates too): every PromQL expression parses, every metric it
// names is one a running tokengate exports, with the labels and label
// values it selects and groups by, and every template and legend names
// only labels its expression keeps.
package monitoring_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"

	"github.com/tokengate/tokengate/tools/internal/build"
)

// ruleFile is a Prometheus rule file, decoded strictly.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// query is one PromQL expression and where it comes from.
type query struct {
	where string
	expr  string
	// labels are texts that may name the expression's labels: annotation
	// templates ({{ $labels.x }}) or a legend ({{x}}).
	templates []string
	legend    bool
}

func filesDir(t *testing.T) string {
	return filepath.Join(build.Root(t), "charts", "tokengate", "files")
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filesDir(t), "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var qs []query
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("alerts.yaml: group %s: alert name %q empty or repeated", g.Name, r.Alert)
			}
			seen[r.Alert] = true
			if !slices.Contains([]string{"warning", "critical"}, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: no summary or description", r.Alert)
			}
			q := query{where: "alert " + r.Alert, expr: r.Expr}
			for _, a := range r.Annotations {
				q.templates = append(q.templates, a)
			}
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		t.Fatal("alerts.yaml: no alert")
	}
	return qs
}

// panel is what the test reads of a Grafana panel.
type panel struct {
	ID      int     `json:"id"`
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVariables are replaced before parsing, as Grafana would.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h", "$job", ".*")

func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filesDir(t), "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard.json: no uid or title")
	}
	var qs []query
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d repeated", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, tg := range p.Targets {
				qs = append(qs, query{where: "panel " + p.Title, expr: grafanaVariables.Replace(tg.Expr), templates: []string{tg.LegendFormat}, legend: true})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		// label_values(metric, label) is Grafana's, not PromQL: check the
		// metric and the label as a selector grouped by the label.
		if m, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			metric, label, _ := strings.Cut(strings.TrimSuffix(m, ")"), ",")
			qs = append(qs, query{where: "variable " + v.Name, expr: "count by (" + strings.TrimSpace(label) + ") (" + metric + ")"})
		}
	}
	return qs
}

// parse parses a query's expression, failing the test when it does not.
func parse(t *testing.T, q query) parser.Expr {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
	if err != nil {
		t.Errorf("%s: %q: %v", q.where, q.expr, err)
		return nil
	}
	return e
}

// TestQueriesParse: every expression parses, and every annotation template
// and legend names only labels the expression keeps (its outermost
// aggregation's grouping).
func TestQueriesParse(t *testing.T) {
	for _, q := range append(alertQueries(t), dashboardQueries(t)...) {
		e := parse(t, q)
		if e == nil {
			continue
		}
		kept, known := outputLabels(e)
		for _, text := range q.templates {
			checkTemplate(t, q, text, kept, known)
		}
	}
}

// outputLabels is the grouping of the outermost aggregation: the labels
// the result keeps. known is false when there is none to go by.
func outputLabels(e parser.Expr) (kept []string, known bool) {
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if a, ok := n.(*parser.AggregateExpr); ok && !known && !a.Without {
			kept, known = a.Grouping, true
		}
		return nil
	})
	return kept, known
}

// legendLabel is a label a Grafana legend names: {{label}}.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// checkTemplate checks that an annotation template (Prometheus's: $labels,
// $value) parses and, executed with only the kept labels, names no other;
// and that a legend (Grafana's {{label}}) names only kept labels.
func checkTemplate(t *testing.T, q query, text string, kept []string, known bool) {
	t.Helper()
	if q.legend {
		for _, m := range legendLabel.FindAllStringSubmatch(text, -1) {
			if known && !slices.Contains(kept, m[1]) {
				t.Errorf("%s: legend %q names %q, which the expression does not keep (%v)", q.where, text, m[1], kept)
			}
		}
		return
	}
	labels := map[string]string{}
	for _, l := range kept {
		labels[l] = "x"
	}
	funcs := template.FuncMap{"humanize": func(float64) string { return "1" }}
	tpl, err := template.New(q.where).Option("missingkey=error").Funcs(funcs).Parse("{{$labels := .Labels}}{{$value := .Value}}" + text)
	if err != nil {
		t.Errorf("%s: template %q: %v", q.where, text, err)
		return
	}
	if known {
		if err := tpl.Execute(new(bytes.Buffer), map[string]any{"Labels": labels, "Value": 1.0}); err != nil {
			t.Errorf("%s: template %q names a label the expression does not keep (%v): %v", q.where, text, kept, err)
		}
	}
}

// targetLabels are added by Prometheus's scrape (and the Prometheus
// Operator's), not by tokengate.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// TestMetricsExist: every metric an alert or a panel reads is one a running
// tokengate exports (with the memory store or the Redis store), with every
// label it selects or groups by, and every label value it selects.
func TestMetricsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tokengate and redis-server")
	}
	have := scrapeTokengate(t)
	for _, q := range append(alertQueries(t), dashboardQueries(t)...) {
		e := parse(t, q)
		if e == nil {
			continue
		}
		parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				checkSelector(t, q, have, n)
			case *parser.AggregateExpr:
				checkGrouping(t, q, have, n)
			}
			return nil
		})
	}
}

func checkSelector(t *testing.T, q query, have exported, vs *parser.VectorSelector) {
	t.Helper()
	labels, ok := have[vs.Name]
	if !ok {
		t.Errorf("%s: metric %s: tokengate exports no such series", q.where, vs.Name)
		return
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" || slices.Contains(targetLabels, m.Name) {
			continue
		}
		values, ok := labels[m.Name]
		switch {
		case !ok:
			t.Errorf("%s: %s has no label %q", q.where, vs.Name, m.Name)
		case m.Type.String() == "=" || m.Type.String() == "!=":
			if !values[m.Value] {
				t.Errorf("%s: %s{%s} never had the value %q (seen: %v)", q.where, vs.Name, m.Name, m.Value, keys(values))
			}
		}
	}
}

// checkGrouping: each label an aggregation groups by is a target label,
// or a label of a metric it aggregates.
func checkGrouping(t *testing.T, q query, have exported, a *parser.AggregateExpr) {
	t.Helper()
	for _, l := range a.Grouping {
		if slices.Contains(targetLabels, l) {
			continue
		}
		found := false
		parser.Inspect(a.Expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				_, has := have[vs.Name][l]
				found = found || has
			}
			return nil
		})
		if !found {
			t.Errorf("%s: groups by %q, which no metric it aggregates has", q.where, l)
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestREADMEListsAlerts: docs/observability.md's "Dashboards and alerts"
// names every alert of alerts.yaml, and no other.
func TestREADMEListsAlerts(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(build.Root(t), "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Dashboards and alerts\n")
	if !ok {
		t.Fatal(`docs/observability.md has no "Dashboards and alerts" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Tokengate[A-Za-z]+)`").FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	for _, q := range alertQueries(t) {
		name := strings.TrimPrefix(q.where, "alert ")
		if !listed[name] {
			t.Errorf("docs/observability.md does not list the alert %s", name)
		}
		delete(listed, name)
	}
	for name := range listed {
		t.Errorf("docs/observability.md lists %s, which alerts.yaml does not have", name)
	}
}
