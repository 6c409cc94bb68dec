package chart_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/yaml"
)

// TestMonitoring: the dashboard ConfigMap and the PrometheusRule are off by
// default; switched on, they carry files/dashboard.json and
// files/alerts.yaml as they are (one copy of each, which tools/monitoring
// checks against a running tokengate), with the labels Grafana's sidecar
// and the Prometheus Operator select by.
func TestMonitoring(t *testing.T) {
	c := loadChart(t)
	off, err := render(t, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if off.PrometheusRule != nil || slices.ContainsFunc(off.ConfigMaps, func(cm *corev1.ConfigMap) bool { return cm.Labels["grafana_dashboard"] != "" }) {
		t.Errorf("defaults render %v: the dashboard and the rules must be off", off.Kinds)
	}

	vals := values(t, `
grafanaDashboard: {enabled: true, namespace: monitoring, annotations: {grafana_folder: Rate limits}}
prometheusRule: {enabled: true, labels: {release: prom}}
`)
	o, err := render(t, c, vals)
	if err != nil {
		t.Fatal(err)
	}
	checkAlways(t, o)
	lintChart(t, vals)

	var dash map[string]any
	for _, cm := range o.ConfigMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		if cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Rate limits" {
			t.Errorf("dashboard ConfigMap %s/%s annotations %v", cm.Namespace, cm.Name, cm.Annotations)
		}
		if err := json.Unmarshal([]byte(cm.Data["tokengate.json"]), &dash); err != nil {
			t.Fatalf("dashboard ConfigMap: tokengate.json: %v", err)
		}
	}
	var file map[string]any
	readFile(t, "dashboard.json", json.Unmarshal, &file)
	if dash == nil || !reflect.DeepEqual(dash, file) {
		t.Error("no dashboard ConfigMap with the label grafana_dashboard=1 holding files/dashboard.json")
	}

	pr := o.PrometheusRule
	if pr == nil || pr.Labels["release"] != "prom" {
		t.Fatalf("PrometheusRule %+v", pr)
	}
	var rendered, rules any
	js, err := json.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &rendered); err != nil {
		t.Fatal(err)
	}
	readFile(t, "alerts.yaml", func(b []byte, v any) error { return yaml.Unmarshal(b, v) }, &rules)
	if !reflect.DeepEqual(rendered, rules) {
		t.Errorf("PrometheusRule spec differs from files/alerts.yaml:\n%s", js)
	}
}

// readFile decodes one of the chart's files/.
func readFile(t *testing.T, name string, decode func([]byte, any) error, dst any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(t), "files", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := decode(data, dst); err != nil {
		t.Fatalf("files/%s: %v", name, err)
	}
}
