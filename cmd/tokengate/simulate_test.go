package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateJSON runs `tokengate simulate` with --compare and checks its
// whole JSON output: capacity 10 at 1/s against a raised 12, 15 requests
// at t=0, one a nanosecond before the first token is back, one at 1 s.
func TestSimulateJSON(t *testing.T) {
	dir := t.TempDir()
	pol := "domains:\n  edge:\n    - name: per-user\n      match: [{key: user}]\n      capacity: %s\n      refill: 1/s\n"
	live, raised, trace := filepath.Join(dir, "live.yaml"), filepath.Join(dir, "raised.yaml"), filepath.Join(dir, "trace.csv")
	os.WriteFile(live, []byte(strings.Replace(pol, "%s", "10", 1)), 0o644)
	os.WriteFile(raised, []byte(strings.Replace(pol, "%s", "12", 1)), 0o644)
	os.WriteFile(trace, []byte("t,domain,entries,hits\n"+strings.Repeat("0,edge,user=a,\n", 15)+"0.999999999,edge,user=a,\n1.0,edge,user=a,\n"), 0o644)

	var out, errOut bytes.Buffer
	if code := run([]string{"simulate", "--policy", live, "--trace", trace, "--compare", raised, "--format", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	rule := func(allowed, rejected string) string {
		return `
    {
      "domain": "edge",
      "rule": "per-user",
      "shadow": false,
      "charge": "before_request",
      "allowed": ` + allowed + `,
      "rejected": ` + rejected + `,
      "refused": 0,
      "blocked": 0,
      "refunds": 0,
      "checks": 0,
      "in_debt": 0,
      "reports": 0,
      "charged": ` + allowed + `,
      "forgiven": 0,
      "lowest": 0,
      "first_dry": "0"
    }`
	}
	want := `{
  "policy": "` + live + `",
  "requests": 17,
  "over_limit": 6,
  "no_rule": 0,
  "end": "1",
  "rules": [` + rule("11", "6") + `
  ],
  "compare": {
    "policy": "` + raised + `",
    "requests": 17,
    "over_limit": 4,
    "no_rule": 0,
    "end": "1",
    "rules": [` + strings.ReplaceAll(rule("13", "4"), "\n", "\n  ") + `
    ]
  }
}
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestSimulateExample replays the example trace, in both formats, through
// the example policy: the same answers, as a table, and a plot.
func TestSimulateExample(t *testing.T) {
	const pol = "../../config/examples/api-gateway.yaml"
	var outputs []string
	for _, trace := range []string{"../../config/examples/api-gateway-trace.csv", "../../config/examples/api-gateway-trace.jsonl"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"simulate", "--policy", pol, "--trace", trace}, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", trace, code, errOut.String())
		}
		outputs = append(outputs, strings.SplitN(out.String(), "\n", 2)[1])
	}
	if outputs[0] != outputs[1] {
		t.Fatalf("CSV:\n%s\nJSON lines:\n%s", outputs[0], outputs[1])
	}
	for _, row := range []string{
		"policy ../../config/examples/api-gateway.yaml: 4 over limit, 1 descriptor without a rule",
		"domain      rule                               allowed  rejected  refused  blocked  refunds  first dry",
		"public-api  per-api-key                        14       2         1        1        1        0s",
		"public-api  exports                            3        1         0        0        0        1s",
		"public-api  per-api-key-strict-trial (shadow)  2        8         0        0        0        0s",
	} {
		if !strings.Contains(outputs[0], row+"\n") {
			t.Errorf("no line %q in:\n%s", row, outputs[0])
		}
	}

	plot := filepath.Join(t.TempDir(), "out.png")
	var out, errOut bytes.Buffer
	if code := run([]string{"simulate", "--policy", pol, "--trace", "../../config/examples/api-gateway-trace.csv", "--plot", plot}, &out, &errOut); code != 0 {
		t.Fatalf("--plot: exit %d: %s", code, errOut.String())
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width < 1000 {
		t.Fatalf("plot: %+v, %v", cfg, err)
	}
}

func TestSimulateErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("t,domain,entries,hits\n0,public-api,api_key=k1,\nlater,public-api,api_key=k1,\n"), 0o644)
	const pol = "../../config/examples/api-gateway.yaml"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", bad}, "--policy and --trace are required"},
		{[]string{"--policy", pol, "--trace", bad, "--format", "xml"}, `--format "xml": want text or json`},
		{[]string{"--policy", pol, "--trace", bad}, bad + `:3: t "later": want seconds`},
		{[]string{"--policy", pol, "--trace", filepath.Join(dir, "none.csv")}, "no such file"},
		{[]string{"--policy", bad, "--trace", bad}, "bad.csv"},
		{[]string{"--policy", pol, "--trace", bad, "extra"}, "unexpected arguments"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"simulate"}, c.args...), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestSimulateStdin: --trace - reads the trace from standard input, also
// with --plot, which replays it twice.
func TestSimulateStdin(t *testing.T) {
	trace := "t,domain,entries,hits\n" + strings.Repeat("0,public-api,api_key=k1,50\n", 11)
	var out bytes.Buffer
	plot := filepath.Join(t.TempDir(), "out.png")
	if err := simulateCmd([]string{"--policy", "../../config/examples/api-gateway.yaml", "--trace", "-", "--plot", plot}, strings.NewReader(trace), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "trace stdin: 11 requests over 0s\n") ||
		!strings.Contains(out.String(), "public-api  per-api-key  10       1         0        0        0        0s\n") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestSimulateHelp: simulate --help lists its flags and the trace format.
func TestSimulateHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"simulate", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, w := range []string{"--policy", "--trace", "--plot", "--format", "--compare", "--max-buckets", "--hot", "t,domain,entries,hits", `"descriptors"`, "examples:"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("no %q in:\n%s", w, out.String())
		}
	}
}

// TestREADMESimulate: the table docs/simulate.md's "Simulate a policy"
// shows is what the command prints for the example trace, and so is each
// command's output the page shows in a console block.
func TestREADMESimulate(t *testing.T) {
	t.Chdir("../..")
	doc, err := os.ReadFile("docs/simulate.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Simulate a policy\n")
	section, _, _ = strings.Cut(section, "\n## ")
	_, table, ok := strings.Cut(section, "```\ntrace ")
	table, _, _ = strings.Cut(table, "```")
	if !ok {
		t.Fatal("docs/simulate.md's Simulate a policy shows no table")
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"simulate", "--policy", "config/examples/api-gateway.yaml", "--trace", "config/examples/api-gateway-trace.csv"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := out.String(); got != "trace "+table {
		t.Fatalf("docs/simulate.md shows:\ntrace %s\nthe command prints:\n%s", table, got)
	}
	// Every console block of the page is the command it shows and what
	// it prints.
	blocks := strings.Split(string(doc), "```console\n$ tokengate simulate ")[1:]
	if len(blocks) == 0 {
		t.Fatal("docs/simulate.md shows no console block of tokengate simulate")
	}
	for _, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		args, want, _ := strings.Cut(b, "\n")
		out.Reset()
		if code := run(append([]string{"simulate"}, strings.Fields(args)...), &out, &errOut); code != 0 {
			t.Fatalf("simulate %s: exit %d: %s", args, code, errOut.String())
		}
		if out.String() != want {
			t.Errorf("docs/simulate.md shows for simulate %s:\n%s\nthe command prints:\n%s", args, want, out.String())
		}
	}
}
