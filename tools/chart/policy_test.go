package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"

	"github.com/tokengate/tokengate/tools/internal/build"
)

// checkInitContainer holds for every rendering: a policy from a ConfigMap
// is validated by an init container on the same mount, with the same image
// and security, before tokengate serves it; the built-in policy needs none.
func checkInitContainer(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if findVolume(spec.Volumes, "policy") == nil {
		if len(spec.InitContainers) != 0 {
			t.Errorf("init containers %v without a policy volume", spec.InitContainers)
		}
		return
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the policy's validation", len(spec.InitContainers))
	}
	ic, ct := spec.InitContainers[0], spec.Containers[0]
	if ic.Name != "validate-policy" || !slices.Equal(ic.Args, []string{"validate", "/etc/tokengate/policy.yaml"}) {
		t.Errorf("init container %s args %q", ic.Name, ic.Args)
	}
	if ic.Image != ct.Image || ic.ImagePullPolicy != ct.ImagePullPolicy {
		t.Errorf("init container image %s (%s), tokengate's %s (%s)", ic.Image, ic.ImagePullPolicy, ct.Image, ct.ImagePullPolicy)
	}
	checkSecurity(t, spec.SecurityContext, ic.SecurityContext)
	if !slices.ContainsFunc(ic.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "policy" && m.MountPath == "/etc/tokengate" && m.ReadOnly && m.SubPath == ""
	}) {
		t.Errorf("init container mounts %+v, want the policy read-only at /etc/tokengate", ic.VolumeMounts)
	}
}

// TestPolicyChecks: policy.content that cannot be a policy stops the
// rendering, for tokengate's format (domains:) and envoyproxy/ratelimit's
// (domain:).
func TestPolicyChecks(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct{ name, content, want string }{
		{"not YAML", "domains: [unclosed", "not a YAML map"},
		{"a list", "- edge\n- api\n", "not a YAML map"},
		{"a misspelt domains", "domians: {edge: []}\n", "neither `domains:`"},
		{"domains a list", "domains: [edge]\n", "domains must be a map"},
		{"a domain that is no list of rules", "domains: {edge: {name: per-user}}\n", `domain "edge" must be a list of rules`},
		{"a domain that is no string", "domain: [edge]\ndescriptors: []\n", "neither `domains:`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, c, map[string]any{"policy": map[string]any{"content": tc.content}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	for _, content := range []string{
		"domains: {}\n",
		"domains:\n  edge:\n",
		"domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
	} {
		if _, err := render(t, c, map[string]any{"policy": map[string]any{"content": content}}); err != nil {
			t.Errorf("policy.content %q: %v", content, err)
		}
	}
}

// TestPolicyJobOff: policy.validateJob false renders no hook (for `helm
// template | kubectl apply`), and the init container stays.
func TestPolicyJobOff(t *testing.T) {
	o, err := render(t, loadChart(t), values(t, "policy: {validateJob: false}"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Job != nil || len(o.ConfigMaps) != 1 || len(o.Deployment.Spec.Template.Spec.InitContainers) != 1 {
		t.Errorf("validateJob false renders %v with %d init containers", o.Kinds, len(o.Deployment.Spec.Template.Spec.InitContainers))
	}
}

// TestInitContainerRefusesBadPolicy runs the init container's command, the
// built binary on the rendered ConfigMap's policy: the default policy
// passes, a policy that passes the render-time check but not tokengate's
// validation stops the pod with the problem and its line.
func TestInitContainerRefusesBadPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokengate")
	}
	bin := build.Tokengate(t)
	c := loadChart(t)
	for _, tc := range []struct {
		name, content string
		ok            bool
		want          string
	}{
		{"the default policy", "", true, "OK"},
		{"a negative capacity", "domains:\n  edge:\n    - name: per-user\n      match: [{key: user_id}]\n      capacity: -1\n      refill: 1/s\n", false, "policy.yaml:5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			if tc.content != "" {
				vals["policy"] = map[string]any{"content": tc.content}
			}
			o, err := render(t, c, vals)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(o.ConfigMaps[0].Data["policy.yaml"]), 0o644); err != nil {
				t.Fatal(err)
			}
			ic := o.Deployment.Spec.Template.Spec.InitContainers[0]
			args := slices.Clone(ic.Args)
			for i, a := range args {
				args[i] = strings.Replace(a, ic.VolumeMounts[0].MountPath, dir, 1)
			}
			out, err := exec.Command(bin, args...).CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
				t.Errorf("tokengate %q: %v, want success %v and %q in:\n%s", args, err, tc.ok, tc.want, out)
			}
		})
	}
}

// TestTemplateWithoutKubeVersion renders the chart as `helm template`
// does with no --kube-version (action.Install in client-only mode): with
// Helm's default capabilities, whose Kubernetes version is v1.20 in an SDK
// build (release binaries set a newer one), the chart's kubeVersion must
// admit it and the rendering must be the same as for a 1.31 cluster.
func TestTemplateWithoutKubeVersion(t *testing.T) {
	c := loadChart(t)
	caps := chartutil.DefaultCapabilities.Copy()
	if v := c.Metadata.KubeVersion; v != "" && !chartutil.IsCompatibleRange(v, caps.KubeVersion.String()) {
		t.Fatalf("helm template without --kube-version: chart requires kubeVersion %s, incompatible with Helm's default %s", v, caps.KubeVersion.String())
	}
	vals, err := chartutil.ToRenderValues(c, withImage(nil), chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		t.Fatalf("helm template without --kube-version: %v", err)
	}
	vals, err = chartutil.ToRenderValues(c, withImage(nil), chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true},
		&chartutil.Capabilities{KubeVersion: kubeVersion, APIVersions: caps.APIVersions, HelmVersion: caps.HelmVersion})
	if err != nil {
		t.Fatal(err)
	}
	files131, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(files, files131) {
		t.Error("the chart renders differently without --kube-version: a template depends on .Capabilities.KubeVersion")
	}
}

// checkPolicyJob holds for every rendering: with a policy ConfigMap and
// policy.validateJob, a pre-install,pre-upgrade hook Job runs the init
// container's validation on the policy about to be applied (a hook
// ConfigMap with the same data, or the existing ConfigMap), and its pod is
// one that neither the Service nor the PodDisruptionBudget selects.
func checkPolicyJob(t *testing.T, o *objects) {
	t.Helper()
	pod := o.Deployment.Spec.Template.Spec
	if len(pod.InitContainers) == 0 {
		if o.Job != nil {
			t.Error("a policy-check Job without a policy")
		}
		return
	}
	j := o.Job
	if j == nil {
		return // policy.validateJob: false
	}
	for _, kv := range [][2]string{{"helm.sh/hook", "pre-install,pre-upgrade"}, {"helm.sh/hook-weight", "0"}, {"helm.sh/hook-delete-policy", "before-hook-creation,hook-succeeded"},
		{"helm.sh/hook-output-log-policy", "hook-failed"}} {
		if j.Annotations[kv[0]] != kv[1] {
			t.Errorf("Job annotation %s = %q, want %q", kv[0], j.Annotations[kv[0]], kv[1])
		}
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job retries: backoffLimit %v, restartPolicy %s", j.Spec.BackoffLimit, j.Spec.Template.Spec.RestartPolicy)
	}
	spec := j.Spec.Template.Spec
	if len(spec.Containers) != 1 || !reflect.DeepEqual(spec.Containers[0], pod.InitContainers[0]) {
		t.Errorf("Job containers %+v, want the init container %+v", spec.Containers, pod.InitContainers[0])
	}
	checkSecurity(t, spec.SecurityContext, spec.Containers[0].SecurityContext)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the Job mounts a service account token")
	}
	if selects(t, o.Service.Spec.Selector, j.Spec.Template.Labels) || selects(t, o.PDB.Spec.Selector.MatchLabels, j.Spec.Template.Labels) {
		t.Errorf("Job pod labels %v are selected by the Service or the PDB", j.Spec.Template.Labels)
	}
	jv, dv := findVolume(spec.Volumes, "policy"), findVolume(pod.Volumes, "policy")
	if jv == nil || jv.ConfigMap == nil || !reflect.DeepEqual(jv.ConfigMap.Items, dv.ConfigMap.Items) {
		t.Fatalf("Job policy volume %+v, the pods' %+v", jv, dv)
	}
	if jv.ConfigMap.Name == dv.ConfigMap.Name {
		return // an existing ConfigMap: the chart does not write it
	}
	var hook, served *corev1.ConfigMap
	for _, cm := range o.ConfigMaps {
		switch cm.Name {
		case jv.ConfigMap.Name:
			hook = cm
		case dv.ConfigMap.Name:
			served = cm
		}
	}
	if hook == nil || served == nil || !reflect.DeepEqual(hook.Data, served.Data) {
		t.Fatalf("the Job's ConfigMap %s does not hold the policy the pods get", jv.ConfigMap.Name)
	}
	if hook.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" || hook.Annotations["helm.sh/hook-weight"] != "-1" {
		t.Errorf("hook ConfigMap annotations %v: it must exist before the Job", hook.Annotations)
	}
}
