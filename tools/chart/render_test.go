package chart_test

// Rendering, linting and strict decoding of the chart, through the Helm SDK
// (helm.sh/helm/v3) in-process: no helm binary, no cluster.

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/tokengate/tokengate/tools/internal/build"
	"github.com/tokengate/tokengate/tools/internal/kube"
)

const (
	releaseName = "edge"
	namespace   = "ratelimit"
)

// kubeVersion is the cluster the chart is rendered and linted for; the
// chart needs at least 1.27 (native gRPC probes).
var kubeVersion = chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}

// chartDir is charts/tokengate under the repository's root.
func chartDir(t testing.TB) string {
	return filepath.Join(build.Root(t), "charts", "tokengate")
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// objects is what one rendering produced, decoded into the Kubernetes API
// types. Notes is the rendered NOTES.txt.
type objects struct {
	Deployment     *appsv1.Deployment
	Service        *corev1.Service
	ServiceAccount *corev1.ServiceAccount
	ConfigMaps     []*corev1.ConfigMap
	PDB            *policyv1.PodDisruptionBudget
	HPA            *autoscalingv2.HorizontalPodAutoscaler
	ServiceMonitor *monitoringv1.ServiceMonitor
	PrometheusRule *monitoringv1.PrometheusRule
	Job            *batchv1.Job // the policy-check hook
	Notes          string
	Kinds          []string // every kind rendered, sorted
}

// testImage is the image the tests render the chart with, unless their
// values set one: the chart renders nothing without image.repository (no
// image is published). It is the one docs/operations.md loads into kind.
var testImage = map[string]any{"repository": "tokengate", "tag": "dev"}

// withImage is values with testImage under the image they set.
func withImage(values map[string]any) map[string]any {
	out := maps.Clone(values)
	if out == nil {
		out = map[string]any{}
	}
	img := maps.Clone(testImage)
	if v, ok := values["image"].(map[string]any); ok {
		maps.Copy(img, v)
	}
	out["image"] = img
	return out
}

// render renders the chart with values over its defaults and testImage,
// as `helm install` would (schema validation included, strict templates: a
// reference to a missing value fails), and decodes every object strictly.
func render(t testing.TB, c *chart.Chart, values map[string]any) (*objects, error) {
	t.Helper()
	return renderRelease(t, c, releaseName, namespace, withImage(values))
}

// renderRelease is render for release name in namespace ns, with values
// over the chart's defaults alone.
func renderRelease(t testing.TB, c *chart.Chart, name, ns string, values map[string]any) (*objects, error) {
	t.Helper()
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	opts := chartutil.ReleaseOptions{Name: name, Namespace: ns, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(c, values, opts, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, err
	}
	objs := &objects{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			objs.Notes = files[name]
			continue
		}
		for _, doc := range releaseutil.SplitManifests(files[name]) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			if err := objs.add(name, []byte(doc)); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
		}
	}
	sort.Strings(objs.Kinds)
	return objs, nil
}

// add decodes one rendered document into the API type of its kind.
func (o *objects) add(file string, doc []byte) error {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	o.Kinds = append(o.Kinds, meta.Kind)
	var dst any
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		o.Deployment = new(appsv1.Deployment)
		dst = o.Deployment
	case "v1 Service":
		o.Service = new(corev1.Service)
		dst = o.Service
	case "v1 ServiceAccount":
		o.ServiceAccount = new(corev1.ServiceAccount)
		dst = o.ServiceAccount
	case "v1 ConfigMap":
		cm := new(corev1.ConfigMap)
		o.ConfigMaps = append(o.ConfigMaps, cm)
		dst = cm
	case "policy/v1 PodDisruptionBudget":
		o.PDB = new(policyv1.PodDisruptionBudget)
		dst = o.PDB
	case "autoscaling/v2 HorizontalPodAutoscaler":
		o.HPA = new(autoscalingv2.HorizontalPodAutoscaler)
		dst = o.HPA
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o.ServiceMonitor = new(monitoringv1.ServiceMonitor)
		dst = o.ServiceMonitor
	case "batch/v1 Job":
		o.Job = new(batchv1.Job)
		dst = o.Job
	case "monitoring.coreos.com/v1 PrometheusRule":
		o.PrometheusRule = new(monitoringv1.PrometheusRule)
		dst = o.PrometheusRule
	default:
		return fmt.Errorf("unexpected %s %s", meta.APIVersion, meta.Kind)
	}
	return kube.DecodeStrict(doc, dst)
}

// lintChart runs Helm's chart linter with values over the defaults and
// testImage, as `helm lint --strict` would: any warning or error fails.
func lintChart(t *testing.T, values map[string]any) {
	t.Helper()
	l := lint.AllWithKubeVersion(chartDir(t), withImage(values), namespace, &kubeVersion)
	var out bytes.Buffer
	for _, m := range l.Messages {
		fmt.Fprintln(&out, m)
	}
	if l.HighestSeverity >= support.WarningSev {
		t.Errorf("helm lint:\n%s", out.String())
	} else if out.Len() > 0 {
		t.Logf("helm lint (info only):\n%s", out.String())
	}
}
