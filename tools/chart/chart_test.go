package chart_test

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	goyaml "sigs.k8s.io/yaml"

	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/tools/internal/build"
)

// values reads a values override written as YAML, as `helm install -f`.
func values(t *testing.T, y string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(y))
	if err != nil {
		t.Fatalf("values %q: %v", y, err)
	}
	return v.AsMap()
}

// TestRender renders and lints the chart for its defaults and each option,
// decodes every object strictly into the Kubernetes API types, and checks
// what every rendering must hold plus what the option is for.
func TestRender(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct {
		name   string
		values string
		check  func(t *testing.T, o *objects)
	}{
		{"defaults", "", func(t *testing.T, o *objects) {
			want := []string{"ConfigMap", "ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount"}
			if !slices.Equal(o.Kinds, want) {
				t.Errorf("kinds %v, want %v", o.Kinds, want)
			}
			if r := o.Deployment.Spec.Replicas; r == nil || *r != 1 {
				t.Errorf("replicas %v, want 1", r)
			}
			wantArgs(t, o, "--store=memory", "--grpc-addr=:8081", "--http-addr=:8080", "--max-buckets=1000000")
			if !strings.Contains(o.Notes, "tokengate (tokengate:dev) is deployed") || !strings.Contains(o.Notes, "limits are exact") ||
				!strings.Contains(o.Notes, "Job edge-tokengate-policy-check") {
				t.Errorf("NOTES:\n%s", o.Notes)
			}
		}},
		{"redis with the password as a file", `
replicaCount: 3
store: redis
redis: {addr: "redis-master.redis:6379", password: {existingSecret: redis-auth, key: redis-password}}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--store=redis", "--redis-addr=redis-master.redis:6379",
				"--redis-password-file=/etc/tokengate-redis/redis-password",
				"--redis-local-share=0.3333333333333333") // 3 pods: a third each
			for _, a := range o.Deployment.Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--redis-db") || strings.HasPrefix(a, "--redis-timeout") {
					t.Errorf("arg %s: an unset value must keep tokengate's default", a)
				}
			}
			v := volume(t, o, "redis-password")
			if v.Secret == nil || v.Secret.SecretName != "redis-auth" || v.Secret.Items[0].Key != "redis-password" {
				t.Errorf("redis-password volume %+v", v.VolumeSource)
			}
			if env(o, "TOKENGATE_REDIS_PASSWORD") != nil {
				t.Error("the password is in the environment too")
			}
			if !strings.Contains(o.Notes, "shared through Redis") {
				t.Errorf("NOTES:\n%s", o.Notes)
			}
		}},
		{"redis with the password in the environment, autoscaled", `
store: redis
redis: {url: "rediss://redis:6379", sentinelMaster: main, db: 2, timeout: 20ms, password: {existingSecret: redis-auth, as: env}}
autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 4}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--redis-url=rediss://redis:6379", "--redis-sentinel-master=main", "--redis-db=2",
				"--redis-timeout=20ms", "--redis-local-share=0.25")
			if findVolume(o.Deployment.Spec.Template.Spec.Volumes, "redis-password") != nil {
				t.Error("the password is mounted as a file too")
			}
			e := env(o, "TOKENGATE_REDIS_PASSWORD")
			if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "redis-auth" || e.ValueFrom.SecretKeyRef.Key != "password" {
				t.Errorf("TOKENGATE_REDIS_PASSWORD %+v", e)
			}
			if o.HPA == nil || o.HPA.Spec.MaxReplicas != 4 || *o.HPA.Spec.MinReplicas != 2 ||
				o.HPA.Spec.ScaleTargetRef.Name != o.Deployment.Name {
				t.Errorf("HPA %+v", o.HPA)
			}
			if o.Deployment.Spec.Replicas != nil {
				t.Error("replicas set alongside an HPA")
			}
		}},
		{"memory store, per-replica limits, headless, ServiceMonitor", `
replicaCount: 2
perReplicaLimits: true
service: {headless: true}
serviceMonitor: {enabled: true, labels: {release: prom}}
`, func(t *testing.T, o *objects) {
			if o.Service.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("clusterIP %q", o.Service.Spec.ClusterIP)
			}
			sm := o.ServiceMonitor
			if sm == nil || sm.Labels["release"] != "prom" || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
				t.Fatalf("ServiceMonitor %+v", sm)
			}
			if !selects(t, sm.Spec.Selector.MatchLabels, o.Service.Labels) {
				t.Error("the ServiceMonitor does not select the Service")
			}
			if !strings.Contains(o.Notes, "up to 2 times every limit") {
				t.Errorf("NOTES lacks the per-replica warning:\n%s", o.Notes)
			}
		}},
		{"an existing ConfigMap", `
policy: {existingConfigMap: my-limits, key: limits.yaml}
`, func(t *testing.T, o *objects) {
			if len(o.ConfigMaps) != 0 {
				t.Errorf("the chart made a ConfigMap beside an existing one")
			}
			v := volume(t, o, "policy")
			if v.ConfigMap == nil || v.ConfigMap.Name != "my-limits" || v.ConfigMap.Items[0].Key != "limits.yaml" {
				t.Errorf("policy volume %+v", v.VolumeSource)
			}
		}},
		{"a candidate policy", `
policy: {candidate: {content: "domains: {edge: [{name: per-user, match: [{key: user_id}], capacity: 5, refill: 1/s}]}\n"}}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--policy=/etc/tokengate/policy.yaml", "--candidate-policy=/etc/tokengate-candidate/candidate.yaml")
			cm := o.ConfigMaps[0]
			if !strings.Contains(cm.Data["candidate.yaml"], "capacity: 5") || !strings.Contains(cm.Data["policy.yaml"], "per-client") {
				t.Errorf("policy ConfigMap %s data keys %v", cm.Name, slices.Sorted(maps.Keys(cm.Data)))
			}
			v := volume(t, o, "candidate-policy")
			if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional ||
				len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != "candidate.yaml" || v.ConfigMap.Items[0].Path != "candidate.yaml" {
				t.Errorf("candidate volume %+v", v.VolumeSource)
			}
			if !slices.ContainsFunc(o.Deployment.Spec.Template.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "candidate-policy" && m.MountPath == "/etc/tokengate-candidate" && m.ReadOnly && m.SubPath == ""
			}) {
				t.Error("the candidate is not mounted as a directory at /etc/tokengate-candidate")
			}
			if ic := o.Deployment.Spec.Template.Spec.InitContainers[0]; slices.Contains(ic.Args, "/etc/tokengate-candidate/candidate.yaml") {
				t.Error("the init container validates the candidate: a bad one would stop the pod")
			}
		}},
		{"a candidate key of an existing ConfigMap", `
policy: {existingConfigMap: my-limits, candidate: {enabled: true, key: next.yaml}}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--candidate-policy=/etc/tokengate-candidate/candidate.yaml")
			if v := volume(t, o, "candidate-policy"); v.ConfigMap.Name != "my-limits" || v.ConfigMap.Items[0].Key != "next.yaml" {
				t.Errorf("candidate volume %+v", v.VolumeSource)
			}
		}},
		{"the built-in policy", `
policy: {content: ""}
`, func(t *testing.T, o *objects) {
			if len(o.ConfigMaps) != 0 || len(o.Deployment.Spec.Template.Spec.Volumes) != 0 {
				t.Error("a policy volume without a policy")
			}
			for _, a := range o.Deployment.Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--policy") {
					t.Errorf("arg %s", a)
				}
			}
		}},
		{"gRPC over mTLS from a Secret", `
grpcTLS: {existingSecret: tokengate-tls, clientCAKey: ca.crt, requireClientCert: true}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--grpc-tls-cert-file=/etc/tokengate-tls/tls.crt", "--grpc-tls-key-file=/etc/tokengate-tls/tls.key",
				"--grpc-tls-client-ca-file=/etc/tokengate-tls/ca.crt", "--grpc-tls-require-client-cert")
			v := volume(t, o, "grpc-tls")
			if v.Secret == nil || v.Secret.SecretName != "tokengate-tls" || len(v.Secret.Items) != 3 || v.Secret.Items[2].Path != "ca.crt" {
				t.Errorf("grpc-tls volume %+v", v.VolumeSource)
			}
			c := o.Deployment.Spec.Template.Spec.Containers[0]
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.Name == "grpc-tls" {
					mounted = m.MountPath == "/etc/tokengate-tls" && m.SubPath == "" && m.ReadOnly
				}
			}
			if !mounted {
				t.Errorf("grpc-tls mounts %+v, want a read-only directory at /etc/tokengate-tls", c.VolumeMounts)
			}
			// The kubelet's gRPC probe has no TLS: readiness asks /readyz.
			if p := c.ReadinessProbe; p.GRPC != nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("readiness probe %+v", p.ProbeHandler)
			}
		}},
		{"gRPC over TLS, no client certificates", `
grpcTLS: {existingSecret: tokengate-tls}
`, func(t *testing.T, o *objects) {
			wantArgs(t, o, "--grpc-tls-cert-file=/etc/tokengate-tls/tls.crt", "--grpc-tls-key-file=/etc/tokengate-tls/tls.key")
			for _, a := range o.Deployment.Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--grpc-tls-client-ca-file") || strings.HasPrefix(a, "--grpc-tls-require-client-cert") {
					t.Errorf("arg %s without clientCAKey", a)
				}
			}
			if items := volume(t, o, "grpc-tls").Secret.Items; len(items) != 2 {
				t.Errorf("grpc-tls items %+v", items)
			}
		}},
		{"pinned image, minAvailable, no service account, no GOMEMLIMIT", `
image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
podDisruptionBudget: {minAvailable: 1}
serviceAccount: {create: false}
setGoMemLimit: false
extraArgs: ["--pprof"]
`, func(t *testing.T, o *objects) {
			if img := o.Deployment.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") {
				t.Errorf("image %s", img)
			}
			if o.PDB.Spec.MinAvailable == nil || o.PDB.Spec.MinAvailable.IntValue() != 1 || o.PDB.Spec.MaxUnavailable != nil {
				t.Errorf("PDB %+v", o.PDB.Spec)
			}
			if o.ServiceAccount != nil || o.Deployment.Spec.Template.Spec.ServiceAccountName != "default" {
				t.Error("a service account was made")
			}
			if env(o, "GOMEMLIMIT") != nil {
				t.Error("GOMEMLIMIT set")
			}
			wantArgs(t, o, "--pprof")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := values(t, tc.values)
			o, err := render(t, c, vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			checkAlways(t, o)
			tc.check(t, o)
			lintChart(t, vals)
		})
	}
}

// TestRefuses: settings that would not do what the user believes stop the
// rendering with a message that says why, above all the memory store with
// more than one pod, which multiplies every limit.
func TestRefuses(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct{ name, values, want string }{
		{"memory store, 3 replicas", "replicaCount: 3", "up to 3 times every limit"},
		{"memory store, autoscaled", "autoscaling: {enabled: true, maxReplicas: 4}", "autoscaling up to 4 pods"},
		{"per-replica limits must be true, not a string", `{replicaCount: 2, perReplicaLimits: "yes"}`, "perReplicaLimits"},
		{"redis without an address", "store: redis", "redis.addr"},
		{"a password in the Redis URL", `{store: redis, redis: {url: "redis://:secret@redis:6379"}}`, "url"},
		{"Redis Cluster and Sentinel", `{store: redis, redis: {addr: "r:6379", cluster: true, sentinelMaster: m}}`, "exclude each other"},
		{"a local share above 1", `{store: redis, redis: {addr: "r:6379", localShare: 2}}`, "localShare"},
		{"an unknown store", "store: etcd", "store"},
		{"a password neither file nor env", `{store: redis, redis: {addr: "r:6379", password: {as: stdin}}}`, "password/as"},
		{"min above max", `{store: redis, redis: {addr: "r:6379"}, autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 3}}`, "minReplicas"},
		{"a misspelt value", "replicas: 3", "replicas"},
		{"a candidate without a policy ConfigMap", `{policy: {content: "", candidate: {enabled: true}}}`, "policy.candidate"},
		{"a candidate on the live policy's key", `{policy: {candidate: {enabled: true, key: policy.yaml}}}`, "live policy's key"},
		{"a candidate's content beside an existing ConfigMap", `{policy: {existingConfigMap: m, candidate: {content: "domains: {}"}}}`, "policy.candidate.content"},
		{"a candidate that is no policy", `{policy: {candidate: {content: "domians: {}"}}}`, "policy.candidate.content has neither"},
		{"a deny status that allows", "settings: {forwardAuthDenyStatus: 200}", "forwardAuthDenyStatus"},
		{"client certificates required without their CA", "grpcTLS: {existingSecret: s, requireClientCert: true}", "grpcTLS.clientCAKey"},
		{"a client CA without TLS", "grpcTLS: {clientCAKey: ca.crt}", "grpcTLS.existingSecret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, c, values(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestDefaultPolicy: the chart's default policy (files/policy.yaml, served
// when policy.content is unset) is tokengate's built-in policy, rule for
// rule (comments aside).
func TestDefaultPolicy(t *testing.T) {
	var a, b any
	for _, f := range []struct {
		path string
		v    *any
	}{{filepath.Join(build.Root(t), "config", "default.yaml"), &a}, {filepath.Join(chartDir(t), "files", "policy.yaml"), &b}} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := goyaml.Unmarshal(data, f.v); err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("charts/tokengate/files/policy.yaml differs from config/default.yaml: copy the rules over")
	}
}

// checkAlways holds for every rendering.
func checkAlways(t *testing.T, o *objects) {
	t.Helper()
	d := o.Deployment
	if d == nil || o.Service == nil || o.PDB == nil {
		t.Fatalf("missing objects: %v", o.Kinds)
	}
	pod := d.Spec.Template
	if !selects(t, d.Spec.Selector.MatchLabels, pod.Labels) || !selects(t, o.Service.Spec.Selector, pod.Labels) ||
		!selects(t, o.PDB.Spec.Selector.MatchLabels, pod.Labels) {
		t.Error("a selector misses the pods")
	}
	for k := range pod.Annotations {
		if strings.Contains(k, "checksum") {
			t.Errorf("pod annotation %s: a policy change would restart the pods", k)
		}
	}
	spec := pod.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	ct := spec.Containers[0]
	checkSecurity(t, spec.SecurityContext, ct.SecurityContext)
	checkInitContainer(t, spec)
	checkPolicyJob(t, o)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if ct.Resources.Requests.Cpu().IsZero() || ct.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", ct.Resources)
	}
	if p := ct.ReadinessProbe; p == nil || (p.GRPC == nil || p.GRPC.Port != 8081) && !hasArg(ct.Args, "--grpc-tls-cert-file") {
		t.Errorf("readiness probe %+v, want gRPC on 8081", p)
	}
	if p := ct.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("liveness probe %+v, want HTTP /healthz", p)
	}
	ports := map[string]int32{}
	for _, p := range ct.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != 8081 || ports["http"] != 8080 {
		t.Errorf("container ports %v", ports)
	}
	for _, p := range o.Service.Spec.Ports {
		if p.Name == "grpc" && (p.Port != 8081 || p.AppProtocol == nil || *p.AppProtocol != "grpc") {
			t.Errorf("service port %+v", p)
		}
	}
	for _, m := range ct.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("volume mount %s uses subPath: it would never see an update", m.Name)
		}
		if !m.ReadOnly {
			t.Errorf("volume mount %s is writable", m.Name)
		}
	}
	if v := findVolume(spec.Volumes, "policy"); v != nil {
		wantArgs(t, o, "--policy=/etc/tokengate/policy.yaml")
		if v.ConfigMap == nil || len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Path != "policy.yaml" {
			t.Errorf("policy volume %+v", v.VolumeSource)
		}
		if !slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "policy" && m.MountPath == "/etc/tokengate" }) {
			t.Error("the policy is not mounted at /etc/tokengate")
		}
	}
	for _, cm := range o.ConfigMaps {
		if _, ok := cm.Labels["grafana_dashboard"]; ok {
			continue
		}
		for key, data := range cm.Data {
			p, err := policy.Parse(key, []byte(data))
			if err != nil {
				t.Errorf("ConfigMap %s key %s: %v", cm.Name, key, err)
				continue
			}
			for _, w := range p.Warnings() {
				t.Errorf("ConfigMap %s: %v", cm.Name, w)
			}
		}
	}
}

// checkSecurity: non-root, read-only root filesystem, no privilege, every
// capability dropped, the runtime's default seccomp profile.
func checkSecurity(t *testing.T, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if pod == nil || c == nil {
		t.Fatal("no security context")
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	switch {
	case !isTrue(pod.RunAsNonRoot) || !isTrue(c.RunAsNonRoot):
		t.Error("runAsNonRoot is not set")
	case pod.RunAsUser == nil || *pod.RunAsUser == 0:
		t.Error("runs as root")
	case !isTrue(c.ReadOnlyRootFilesystem):
		t.Error("the root filesystem is writable")
	case !isFalse(c.AllowPrivilegeEscalation) || !isFalse(c.Privileged):
		t.Error("privilege escalation is not ruled out")
	case c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v", c.Capabilities)
	case c.SeccompProfile == nil || c.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp profile")
	}
}

func hasArg(args []string, prefix string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
}

func selects(t *testing.T, selector, objLabels map[string]string) bool {
	t.Helper()
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(objLabels))
}

func wantArgs(t *testing.T, o *objects, want ...string) {
	t.Helper()
	args := o.Deployment.Spec.Template.Spec.Containers[0].Args
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("args %q lack %q", args, w)
		}
	}
}

func env(o *objects, name string) *corev1.EnvVar {
	for _, e := range o.Deployment.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

func volume(t *testing.T, o *objects, name string) *corev1.Volume {
	t.Helper()
	v := findVolume(o.Deployment.Spec.Template.Spec.Volumes, name)
	if v == nil {
		t.Fatalf("no volume %s", name)
	}
	return v
}

func findVolume(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}
