package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat. The kernel fixes
// it at 100 for user space on every architecture Linux runs Go on,
// whatever its internal tick rate, so it is a constant here rather than a
// sysconf(_SC_CLK_TCK) call, which would need cgo.
const userHZ = 100

// proc is a process whose CPU time the run reports.
type proc struct {
	Name string
	PID  int
}

// parsePids parses -pids: "name=pid,name=pid". An empty string is no
// process.
func parsePids(s string) ([]proc, error) {
	if s == "" {
		return nil, nil
	}
	var out []proc
	for _, kv := range strings.Split(s, ",") {
		name, pid, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("-pids %q: %q is not name=pid", s, kv)
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-pids %q: %q: pid must be a positive integer", s, kv)
		}
		out = append(out, proc{Name: name, PID: n})
	}
	return out, nil
}

// procCPU returns the user + system CPU time that process pid has used so
// far, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	ticks, err := parseStatTicks(b)
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatTicks returns utime + stime (fields 14 and 15) of a
// /proc/PID/stat line. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStatTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no ')' after the command name", stat)
	}
	// After ")": field 3 (state) is f[0], so utime (14) is f[11].
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: %d fields after the command name, want at least 13", stat, len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return utime + stime, nil
}

// selfCPU returns the user + system CPU time this process has used so far,
// at microsecond resolution (getrusage), not /proc's 10 ms.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
