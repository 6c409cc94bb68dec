package blackbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/test/tgproc"
)

// idPolicy charges each user 1 per request from a bucket that 250 requests
// cannot empty, and names the request-id descriptor.
const idPolicy = `revision: 1
request_id_key: request_id
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 1000
      refill: 1/h
`

// TestLongRequestIDsKeepNoMemory (the built binary): 250 requests whose ids
// are about 1 MB each, just within the gRPC message limit, raise the
// process's RSS by at most 120 MB. The ids are remembered (the last one
// still replays) but as 16-byte hashes; before they were hashed the memory
// store kept each id whole, 250 MB and more.
func TestLongRequestIDsKeepNoMemory(t *testing.T) {
	const (
		requests  = 250
		idBytes   = 1_000_000 // the whole request stays under 1 MiB
		maxGrowth = 120 << 20
	)
	p, path := startWithPolicy(t, idPolicy)
	pid := pidOf(t, path)
	user := tgproc.Descriptor("user_id", "mallory")
	p.Ask(t, "edge", 0, user)
	before := vmRSS(t, pid)

	id := bytes.Repeat([]byte{'x'}, idBytes)
	var last string
	for i := range requests {
		copy(id, strconv.Itoa(i)+":") // each id its own
		last = string(id)
		if r := p.Ask(t, "edge", 0, user, tgproc.Descriptor("request_id", last)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(1000-2-i) {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	after := vmRSS(t, pid)
	t.Logf("VmRSS %d KiB before, %d KiB after %d requests with %d-byte ids (+%d KiB)", before>>10, after>>10, requests, idBytes, (after-before)>>10)
	if after-before > maxGrowth {
		t.Errorf("RSS grew by %d MiB, want at most %d MiB", (after-before)>>20, maxGrowth>>20)
	}

	remaining := uint32(1000 - 1 - requests)
	if r := p.Ask(t, "edge", 0, user, tgproc.Descriptor("request_id", last)); r.Statuses[0].LimitRemaining != remaining {
		t.Fatalf("a repeat of the last id was not replayed: %v", r)
	}
	if r := p.Ask(t, "edge", 0, user); r.Statuses[0].LimitRemaining != remaining-1 {
		t.Fatalf("the replay was charged: %v", r)
	}
}

// pidOf finds the tokengate process started with the policy file path,
// which is in a directory of the test's own.
func pidOf(t *testing.T, path string) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00"+path+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			return pid
		}
	}
	t.Fatalf("no process runs with %s", path)
	return 0
}

// vmRSS reads the process's resident set size, in bytes, from
// /proc/PID/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
