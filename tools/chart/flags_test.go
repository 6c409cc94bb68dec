package chart_test

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/tools/internal/build"
)

// TestArgsAreFlags: every flag the chart passes is one `tokengate serve`
// has, for the defaults and for every Redis setting, so that a renamed
// flag fails here and not in a crash-looping pod.
func TestArgsAreFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokengate")
	}
	bin := build.Tokengate(t)
	// serve --help lists the flags on stdout and exits 0.
	usage, err := exec.Command(bin, "serve", "--help").Output()
	if err != nil {
		t.Fatalf("tokengate serve --help: %v", err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`).FindAllStringSubmatch(string(usage), -1) {
		flags[m[1]] = true
	}
	if !flags["policy"] || !flags["store"] {
		t.Fatalf("no flags in `tokengate serve --help`:\n%s", usage)
	}

	c := loadChart(t)
	for _, v := range []string{
		"",
		`{settings: {pprof: true, readyRequiresStore: true}, replicaCount: 2, perReplicaLimits: true}`,
		`{store: redis, replicaCount: 2, redis: {addr: "r:6379", url: "rediss://r:6379", db: 1, sentinelMaster: m,
		  password: {existingSecret: s}, timeout: 20ms, dialTimeout: 2s, poolSize: 8, keyPrefix: "tg:", localShare: 0.5}}`,
		`{store: redis, redis: {addr: "r:6379", cluster: true}}`,
		`{policy: {candidate: {enabled: true}}}`,
	} {
		o, err := render(t, c, values(t, v))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		args := o.Deployment.Spec.Template.Spec.Containers[0].Args
		if args[0] != "serve" {
			t.Errorf("first arg %q, want the serve subcommand", args[0])
		}
		if strings.Contains(v, "keyPrefix") && !slices.Contains(args, "--redis-key-prefix=tg:") {
			t.Errorf("args %q: the key prefix did not survive YAML", args)
		}
		for _, a := range args[1:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !flags[name] {
				t.Errorf("values %s: arg %q is not a flag of tokengate serve", v, a)
			}
		}
	}
}
