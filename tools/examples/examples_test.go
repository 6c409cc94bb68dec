// Package examples_test decodes the Kubernetes manifests under examples/
// strictly into the Kubernetes API types. (The Envoy configuration and
// policy inside examples/sidecar are checked by envoy/envoy_test.go in the
// main module, against Envoy's protos and tokengate's policy parser.)
package examples_test

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/tools/internal/kube"
)

func examplesDir(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "examples")
}

// TestManifestsDecode: every Kubernetes object of a built-in kind under
// examples/ is one the API server would accept field for field. YAML that
// is not a Kubernetes object (policies, proxy configurations) and custom
// resources are left to the tests of their own examples.
func TestManifestsDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir(t), "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range kube.SplitDocs(data) {
			kind, err := kube.Kind(doc)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var dst any
			switch kind {
			case " ":
				continue // not a Kubernetes object
			case "networking.k8s.io/v1 Ingress":
				dst = new(networkingv1.Ingress)
			case "v1 ConfigMap":
				dst = new(corev1.ConfigMap)
			case "v1 Service":
				dst = new(corev1.Service)
			case "apps/v1 Deployment":
				dst = new(appsv1.Deployment)
			default:
				if !strings.Contains(kind, ".") || strings.Contains(kind, ".k8s.io/") {
					t.Fatalf("%s document %d: %s is not checked by this test", f, i, kind)
				}
				t.Logf("%s document %d: custom resource %s not checked", f, i, kind)
				continue
			}
			if err := kube.DecodeStrict(doc, dst); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i, kind, err)
			}
		}
	}
}

// TestSidecar: tokengate runs as a native sidecar next to Envoy, starts
// before it, listens for gRPC on localhost only, is locked down, and reads
// its policy from a directory mount that sees ConfigMap updates.
func TestSidecar(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examplesDir(t), "sidecar", "sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	configMaps := map[string]*corev1.ConfigMap{}
	for _, doc := range kube.SplitDocs(data) {
		switch kind, _ := kube.Kind(doc); kind {
		case "apps/v1 Deployment":
			if err := kube.DecodeStrict(doc, &d); err != nil {
				t.Fatal(err)
			}
		case "v1 ConfigMap":
			cm := new(corev1.ConfigMap)
			if err := kube.DecodeStrict(doc, cm); err != nil {
				t.Fatal(err)
			}
			configMaps[cm.Name] = cm
		}
	}
	spec := d.Spec.Template.Spec
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "tokengate" })
	if i < 0 {
		t.Fatal("no tokengate init container")
	}
	tg := spec.InitContainers[i]
	if tg.RestartPolicy == nil || *tg.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("tokengate is not a native sidecar (restartPolicy: Always)")
	}
	if tg.StartupProbe == nil {
		t.Error("no startup probe: Envoy could start before tokengate is ready")
	}
	if !slices.Contains(tg.Args, "--grpc-addr=127.0.0.1:8081") {
		t.Errorf("args %q: gRPC must listen on localhost only", tg.Args)
	}
	if !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" }) {
		t.Error("no envoy container")
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s is not locked down: %+v", c.Name, sc)
		}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" {
				t.Errorf("container %s mounts %s with subPath: it would never see an update", c.Name, m.Name)
			}
		}
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	// The policy the sidecar mounts parses.
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil || !strings.Contains(v.Name, "policy") {
			continue
		}
		cm := configMaps[v.ConfigMap.Name]
		if cm == nil {
			t.Fatalf("volume %s: no ConfigMap %s in the example", v.Name, v.ConfigMap.Name)
		}
		if _, err := policy.Parse("policy.yaml", []byte(cm.Data["policy.yaml"])); err != nil {
			t.Error(err)
		}
	}
}
