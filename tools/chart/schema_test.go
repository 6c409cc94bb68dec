package chart_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

var updateSchema = flag.Bool("update", false, "rewrite definitions.policy of values.schema.json from policy.Schema")

// TestValuesSchemaHoldsPolicySchema: the chart's values.schema.json checks a
// policy given as a map (policy.content, policy.candidate.content) against
// definitions.policy, which is policy.Schema, the schema of
// config/policy.schema.json, less its $schema (one source: the parser's
// field tables). With -update it is rewritten.
func TestValuesSchemaHoldsPolicySchema(t *testing.T) {
	raw, err := policy.Schema()
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	delete(want, "$schema")
	path := filepath.Join(chartDir(t), "values.schema.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := doc["definitions"].(map[string]any)
	if reflect.DeepEqual(defs["policy"], any(want)) {
		return
	}
	if !*updateSchema {
		t.Fatalf("%s: definitions.policy differs from policy.Schema: go test ./chart -run TestValuesSchemaHoldsPolicySchema -update", path)
	}
	if defs == nil {
		defs = map[string]any{}
		doc["definitions"] = defs
	}
	defs["policy"] = want
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fiveErrors is a policy written as values with five mistakes the schema
// sees: a misspelt field, a capacity that is text, a refill in no unit, an
// on_store_error no mode has, and a match that is no list.
const fiveErrors = `
policy:
  content:
    domains:
      edge:
        - name: per-user
          match: [{key: user_id}]
          capacityy: 100
          refill: 10/s
        - name: per-client
          match: [{key: remote_address}]
          capacity: lots
          refill: 10/fortnight
        - name: login
          match: {key: path}
          capacity: 5
          refill: 5/m
          on_store_error: maybe
`

// TestPolicyMapChecked: a policy given as a map is refused at render, as
// helm template, lint and install refuse it, with every mistake named by
// its place; the same policy as text renders (its shape is a policy map) and
// is left to tokengate validate; a good map renders into the ConfigMap as a
// policy tokengate reads, and so does a candidate given as a map.
func TestPolicyMapChecked(t *testing.T) {
	c := loadChart(t)
	_, err := render(t, c, values(t, fiveErrors))
	if err == nil {
		t.Fatal("the five-error policy rendered")
	}
	for _, want := range []string{
		"/policy/content/domains/edge/0", "capacityy",
		"/policy/content/domains/edge/1/capacity",
		"/policy/content/domains/edge/1/refill",
		"/policy/content/domains/edge/2/match",
		"/policy/content/domains/edge/2/on_store_error",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("render error does not name %q:\n%v", want, err)
		}
	}

	asText := values(t, fiveErrors)
	pol := asText["policy"].(map[string]any)
	text, err := json.Marshal(pol["content"])
	if err != nil {
		t.Fatal(err)
	}
	pol["content"] = string(text)
	if _, err := render(t, c, asText); err != nil {
		t.Errorf("the same policy as text: %v", err)
	}

	good := values(t, `
policy:
  content:
    revision: 7
    domains:
      edge:
        - name: per-user
          match: [{key: user_id}]
          capacity: 200
          refill: 1200/m
  candidate:
    content:
      domains:
        edge:
          - name: per-user
            match: [{key: user_id}]
            capacity: 400
            refill: 2400/m
`)
	o, err := render(t, c, good)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	for _, cm := range o.ConfigMaps {
		if strings.HasSuffix(cm.Name, "-policy") {
			data = cm.Data
		}
	}
	for key, capacity := range map[string]int64{"policy.yaml": 200, "candidate.yaml": 400} {
		p, err := policy.Parse(key, []byte(data[key]))
		if err != nil {
			t.Fatalf("%s as rendered: %v\n%s", key, err, data[key])
		}
		p.Activate()
		rules := p.Rules("edge")
		if len(rules) != 1 || rules[0].Name != "per-user" || rules[0].Version.Params.Capacity() != capacity {
			t.Errorf("%s: rules %+v, want per-user of capacity %d", key, rules, capacity)
		}
	}
}
