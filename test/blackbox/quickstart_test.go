package blackbox

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// quickStart is what README's Quick start shows: the request its grpcurl
// loop sends, how many times, the answers it prints (the first and the
// last) and the console blocks ("$ command" then the output).
type quickStart struct {
	request       string
	calls         int
	first, last   string
	consoleBlocks [][]string
}

// readQuickStart reads README.md's "## Quick start" section.
func readQuickStart(t *testing.T) quickStart {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var qs quickStart
	var answers []string
	for _, m := range regexp.MustCompile("(?s)```(\\w+)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		lang, body := m[1], m[2]
		switch lang {
		case "json":
			answers = append(answers, body)
		case "console":
			qs.consoleBlocks = append(qs.consoleBlocks, strings.Split(strings.TrimSpace(body), "\n"))
		case "sh":
			loop := regexp.MustCompile(`for i in ([0-9 ]+); do`).FindStringSubmatch(body)
			data := regexp.MustCompile(`(?s)grpcurl -plaintext -d '(.*?)' localhost:8081 envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`).FindStringSubmatch(body)
			if loop != nil && data != nil {
				qs.calls, qs.request = len(strings.Fields(loop[1])), data[1]
			}
		}
	}
	if qs.calls == 0 || len(answers) != 2 || len(qs.consoleBlocks) == 0 {
		t.Fatalf("Quick start: want a grpcurl loop, two JSON answers and console blocks; found %d calls, %d answers, %d console blocks",
			qs.calls, len(answers), len(qs.consoleBlocks))
	}
	qs.first, qs.last = answers[0], answers[1]
	return qs
}

// TestQuickStart runs README's Quick start against the binary with the
// built-in policy: the grpcurl loop's requests answer as README shows
// (the first and the last in full, the others counting down), and each
// console block's command prints the lines shown.
func TestQuickStart(t *testing.T) {
	qs := readQuickStart(t)
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal([]byte(qs.request), &req); err != nil {
		t.Fatalf("the Quick start's request: %v", err)
	}
	p := start(t)
	var got []*rlsv3.RateLimitResponse
	for range qs.calls {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := p.RLS.ShouldRateLimit(ctx, &req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp)
	}
	sameAnswer(t, "the first answer", qs.first, got[0])
	sameAnswer(t, "the last answer", qs.last, got[len(got)-1])
	for i := 1; i < len(got)-1; i++ {
		want := got[0].Statuses[0].LimitRemaining - uint32(i)
		if got[i].OverallCode != rlsv3.RateLimitResponse_OK || got[i].Statuses[0].LimitRemaining != want {
			t.Errorf("answer %d: %v, remaining %d, want OK with %d left", i+1, got[i].OverallCode, got[i].Statuses[0].LimitRemaining, want)
		}
	}

	for _, block := range qs.consoleBlocks {
		cmd, ok := strings.CutPrefix(block[0], "$ ")
		if !ok {
			t.Fatalf("console block %q does not start with a command", block[0])
		}
		var out string
		switch {
		case strings.HasPrefix(cmd, "tokengate "):
			b, err := exec.Command(binary, strings.Fields(strings.TrimPrefix(cmd, "tokengate "))...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
			out = string(b)
		case strings.HasPrefix(cmd, "curl -s localhost:8080/metrics | grep -E '^tokengate_(buckets|decisions|policy|rpc_duration_seconds_count)' | grep -v ' 0$'"):
			_, page := p.Get(t, "/metrics")
			keep := regexp.MustCompile(`^tokengate_(buckets|decisions|policy|rpc_duration_seconds_count)`)
			var lines []string
			for _, l := range strings.Split(page, "\n") {
				if keep.MatchString(l) && !strings.HasSuffix(l, " 0") {
					lines = append(lines, l)
				}
			}
			if !reflect.DeepEqual(lines, block[1:]) {
				t.Errorf("%s prints\n%s\nREADME shows\n%s", cmd, strings.Join(lines, "\n"), strings.Join(block[1:], "\n"))
			}
			continue
		default:
			t.Fatalf("console block: no way to run %q", cmd)
		}
		for _, line := range block[1:] {
			if !strings.Contains(out, line+"\n") {
				t.Errorf("%s: the output lacks README's line %q:\n%s", cmd, line, out)
			}
		}
	}
}

// sameAnswer compares a response, as grpcurl prints it (protobuf's JSON),
// with README's; a duration or a retry-after may be up to 3s shorter than
// shown (time passes between the calls).
func sameAnswer(t *testing.T, what, readme string, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	js, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(readme), &want); err != nil {
		t.Fatalf("README's %s: %v", what, err)
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if !nearly(want, got, "") {
		t.Errorf("%s is\n%s\nREADME shows\n%s", what, js, readme)
	}
}

// nearly is reflect.DeepEqual, except that durationUntilReset, the
// retry-after header's value and the metadata's retry_after may be up to 3
// seconds below the want, and the metadata's key may be any: its secret
// is random without --key-hash-secret-file.
func nearly(want, got any, key string) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if k == "value" && w["key"] == "retry-after" {
				k = "retry-after"
			}
			gv, ok := g[k]
			if k == "retry-after" {
				gv, ok = g["value"]
			}
			if !ok || !nearly(v, gv, k) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !nearly(w[i], g[i], key) {
				return false
			}
		}
		return true
	case string:
		g, ok := got.(string)
		if !ok {
			return false
		}
		if key == "durationUntilReset" || key == "retry-after" {
			ws, gs := seconds(w), seconds(g)
			return ws >= 0 && gs >= 0 && gs <= ws && gs >= ws-3
		}
		if hashed := regexp.MustCompile(`^[0-9a-f]{12}$`); key == "key" && hashed.MatchString(w) {
			return hashed.MatchString(g)
		}
		return g == w
	case float64:
		if g, ok := got.(float64); ok && key == "retry_after" { // the dynamic metadata's wait
			return g <= w && g >= w-3
		}
	}
	return reflect.DeepEqual(want, got)
}

// seconds reads "12s" (a protobuf Duration) or "12" (a retry-after), -1
// when it is neither.
func seconds(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64)
	if err != nil {
		return -1
	}
	return f
}
