package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// shimSource is an LD_PRELOAD library that adds an offset, read from the
// file named by $REDISTEST_SHIFT_FILE on every call, to the wall clock
// (CLOCK_REALTIME, gettimeofday, time) of the process it is loaded into;
// the monotonic clock is left alone. It is how a test steps the Redis
// host's wall clock without touching the machine's.
const shimSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long shift_ns(void) {
	const char *f = getenv("REDISTEST_SHIFT_FILE");
	long long v = 0;
	FILE *fp;
	if (!f || !(fp = fopen(f, "r"))) return 0;
	if (fscanf(fp, "%lld", &v) != 1) v = 0;
	fclose(fp);
	return v;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	static int (*real)(clockid_t, struct timespec *);
	if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	int r = real(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_ns();
		ts->tv_sec = ns / 1000000000LL;
		ts->tv_nsec = ns % 1000000000LL;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	clock_gettime(CLOCK_REALTIME, &ts);
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// Shift steps the wall clock of a server started by StartShifted.
type Shift struct {
	t    testing.TB
	file string
}

// Set makes the server's wall clock run d ahead of the machine's (behind,
// for a negative d), at once.
func (s *Shift) Set(d time.Duration) {
	s.t.Helper()
	if err := os.WriteFile(s.file, []byte(strconv.FormatInt(int64(d), 10)), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// StartShifted starts a single redis-server, as Start does, whose wall
// clock the test steps with the returned Shift. It builds the shim with
// the C compiler (cc); a machine without one fails the test with a
// message saying how to install it.
func StartShifted(t testing.TB, extra ...string) (*Server, *Shift) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("no C compiler (cc): the clock-step tests build an LD_PRELOAD shim; install one with `apt-get install -y gcc` (.ci/run does)")
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "shift.c"), filepath.Join(dir, "shift.so")
	if err := os.WriteFile(src, []byte(shimSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("build the clock shim: %v\n%s", err, out)
	}
	sh := &Shift{t: t, file: filepath.Join(dir, "shift")}
	sh.Set(0)
	return startWith(t, []string{"LD_PRELOAD=" + lib, "REDISTEST_SHIFT_FILE=" + sh.file}, extra), sh
}
