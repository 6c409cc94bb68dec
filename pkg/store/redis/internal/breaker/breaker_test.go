package breaker

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/pkg/clock"
)

// quiet is an Observer that hears nothing.
type quiet struct{}

func (quiet) Opened(error, int, time.Duration)       {}
func (quiet) ProbeFailed(string, int, time.Duration) {}
func (quiet) Closed(time.Duration)                   {}

func testBreaker(o Options, clk clock.Clock) *Breaker { return New(o, clk, quiet{}) }

var (
	errDown   = errors.New("down")
	errQueued = errors.New("not sent")
)

// fail lets one call through b and reports it failed after d.
func fail(t *testing.T, b *Breaker, clk *clock.Fake, d time.Duration) {
	t.Helper()
	tk, ok := b.Allow()
	if !ok {
		t.Fatal("a call was refused before the circuit opened")
	}
	clk.Add(d)
	b.Report(tk, Failed, errDown)
}

// TestBreaker: failures in a row open the circuit; while open no call is
// tried; after the backoff one probe goes through; success closes it, a
// failure doubles the backoff.
func TestBreaker(t *testing.T) {
	clk := new(clock.Fake)
	b := testBreaker(Options{Failures: 2, Window: new(time.Duration(0)), MinBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}, clk)
	fail(t, b, clk, 0)
	if _, ok := b.Allow(); !ok {
		t.Fatal("one failure opened the circuit")
	}
	fail(t, b, clk, 0)
	if _, ok := b.Allow(); ok {
		t.Fatal("two failures left the circuit closed")
	}
	clk.Add(130 * time.Millisecond) // past the backoff and its jitter
	probe, ok := b.Allow()
	if _, again := b.Allow(); !ok || again {
		t.Fatal("half-open: want exactly one probe")
	}
	b.Report(probe, Failed, errDown)
	clk.Add(150 * time.Millisecond)
	if _, ok := b.Allow(); ok {
		t.Fatal("a failed probe did not double the backoff")
	}
	clk.Add(110 * time.Millisecond)
	probe, ok = b.Allow()
	if !ok {
		t.Fatal("no probe after the doubled backoff")
	}
	b.Report(probe, Succeeded, nil)
	for range 2 { // allow has effects: both calls must pass
		if _, ok := b.Allow(); !ok {
			t.Fatal("success did not close the circuit")
		}
	}
}

// openBreaker is a breaker opened by two failures, past its first backoff.
func openBreaker(t *testing.T) (*Breaker, *clock.Fake) {
	clk := new(clock.Fake)
	b := testBreaker(Options{Failures: 2, Window: new(time.Duration(0)), MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, ProbeTimeout: 500 * time.Millisecond}, clk)
	fail(t, b, clk, 0)
	fail(t, b, clk, 0)
	clk.Add(130 * time.Millisecond)
	return b, clk
}

// TestBreakerProbeOutcomes: every way a probe can end gives the circuit a
// next probe: an unsent one or one whose caller gave up at once, a failed
// or timed-out heavy one after a doubled backoff, one never reported after
// ProbeTimeout and the doubled backoff.
func TestBreakerProbeOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		report  func(b *Breaker, tk Ticket)
		wait    time.Duration // after which the next probe goes through
		notWait time.Duration // before which it does not
	}{
		{"unsent", func(b *Breaker, tk Ticket) { b.Report(tk, Unsent, errQueued) }, 0, -1},
		{"failed", func(b *Breaker, tk Ticket) { b.Report(tk, Failed, errDown) }, 260 * time.Millisecond, 190 * time.Millisecond},
		{"heavy timeout", func(b *Breaker, tk Ticket) { b.Report(tk, Inconclusive, errDown) }, 260 * time.Millisecond, 190 * time.Millisecond},
		{"never reported", func(*Breaker, Ticket) {}, 500*time.Millisecond + 260*time.Millisecond, 690 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, clk := openBreaker(t)
			tk, ok := b.Allow()
			if !ok || tk.probe == 0 {
				t.Fatalf("no probe past the backoff: %+v %v", tk, ok)
			}
			tc.report(b, tk)
			if tc.notWait >= 0 {
				clk.Add(tc.notWait)
				if _, ok := b.Allow(); ok {
					t.Fatalf("a probe %v after a probe that %s", tc.notWait, tc.name)
				}
				clk.Add(tc.wait - tc.notWait)
			}
			next, ok := b.Allow()
			if !ok || next.probe == 0 {
				t.Fatalf("no probe %v after a probe that %s", tc.wait, tc.name)
			}
			b.Report(tk, Succeeded, nil) // the first probe, late: still news that Redis answers
			b.Report(next, Failed, errDown)
			if _, ok := b.Allow(); !ok {
				t.Fatal("a late success did not close the circuit")
			}
		})
	}
}

// TestBreakerStaleProbe: a probe given up on (not reported in time) that
// fails later changes nothing: the probe out now decides.
func TestBreakerStaleProbe(t *testing.T) {
	b, clk := openBreaker(t)
	stale, _ := b.Allow()
	clk.Add(500*time.Millisecond + 260*time.Millisecond)
	probe, ok := b.Allow()
	if !ok {
		t.Fatal("no probe after the first was given up on")
	}
	b.Report(stale, Failed, errDown)
	if b.probe != probe.probe {
		t.Fatal("a stale probe's failure ended the probe out")
	}
	b.Report(probe, Succeeded, nil)
	if _, open := b.OpenFor(); open {
		t.Fatal("the probe's success did not close the circuit")
	}
}

// TestBreakerLateProbe: a probe reported failed after its deadline, with
// no call in between, failed at the deadline: its backoff ran from then,
// so the next call probes at once instead of after a backoff more.
func TestBreakerLateProbe(t *testing.T) {
	b, clk := openBreaker(t)
	late, ok := b.Allow()
	if !ok {
		t.Fatal("no probe past the backoff")
	}
	clk.Add(500*time.Millisecond + 260*time.Millisecond) // its timeout, and the doubled backoff
	b.Report(late, Failed, errDown)
	if _, ok := b.Allow(); !ok {
		t.Fatal("a probe reported after its deadline held the circuit shut past its backoff")
	}
}

// TestBreakerCountsAStallOnce: calls in flight together that fail
// together (one stall timing them all out) are one failure; a call
// started after a counted failure counts again.
func TestBreakerCountsAStallOnce(t *testing.T) {
	clk := new(clock.Fake)
	b := testBreaker(Options{Failures: 3, Window: new(time.Duration(0))}, clk)
	var stalled []Ticket
	for range 64 {
		tk, _ := b.Allow()
		stalled = append(stalled, tk)
	}
	clk.Add(15 * time.Millisecond)
	for _, tk := range stalled {
		b.Report(tk, Failed, errDown)
	}
	if _, ok := b.Allow(); !ok {
		t.Fatal("64 calls timed out by one stall opened the circuit")
	}
	for range 2 {
		fail(t, b, clk, 15*time.Millisecond)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("three failures of calls made one after another left the circuit closed")
	}
}

// TestBreakerWindow: failures in a row open the circuit only once they
// span the window, so a short stall never opens it; a success in between
// starts over.
func TestBreakerWindow(t *testing.T) {
	clk := new(clock.Fake)
	// Its window is the default, 200ms.
	b := testBreaker(Options{Failures: 3}, clk)
	for range 5 { // 75ms of failures in a row: a stall
		fail(t, b, clk, 15*time.Millisecond)
	}
	if _, ok := b.Allow(); !ok {
		t.Fatal("failures over 75ms opened the circuit")
	}
	tk, _ := b.Allow()
	b.Report(tk, Succeeded, nil)
	for range 14 { // the last 195ms after the first of these
		fail(t, b, clk, 15*time.Millisecond)
	}
	if _, ok := b.Allow(); !ok {
		t.Fatal("failures over less than the 200ms window opened the circuit")
	}
	fail(t, b, clk, 15*time.Millisecond)
	if _, ok := b.Allow(); ok {
		t.Fatal("failures over 210ms left the circuit closed")
	}
}

// TestBreakerMachine drives the breaker through random calls, outcomes,
// pings and time against a plain model of what it may do, and checks
// after every step that the circuit can never stay shut: while open, a
// call is let through within the longest backoff plus ProbeTimeout; and
// once calls succeed, it closes.
func TestBreakerMachine(t *testing.T) {
	const (
		minBackoff   = 10 * time.Millisecond
		maxBackoff   = 80 * time.Millisecond
		probeTimeout = 50 * time.Millisecond
		// The longest a call can be refused for from any state: a probe
		// out that is given up on, then the longest backoff and jitter.
		longest = probeTimeout + maxBackoff + maxBackoff/4
	)
	rapid.Check(t, func(rt *rapid.T) {
		clk := new(clock.Fake)
		b := testBreaker(Options{Failures: 2, Window: new(time.Duration(0)), MinBackoff: minBackoff, MaxBackoff: maxBackoff, ProbeTimeout: probeTimeout}, clk)
		var out []Ticket // let through, not reported yet
		var refusedSince int64 = -1
		rt.Repeat(map[string]func(*rapid.T){
			"call": func(rt *rapid.T) {
				tk, ok := b.Allow()
				if _, open := b.OpenFor(); !open && !ok {
					rt.Fatal("a closed circuit refused a call")
				}
				switch {
				case ok:
					out, refusedSince = append(out, tk), -1
				case refusedSince < 0:
					refusedSince = clk.Now()
				case time.Duration(clk.Now()-refusedSince) > longest:
					rt.Fatalf("calls refused for %v (longest possible %v)", time.Duration(clk.Now()-refusedSince), longest)
				}
			},
			"report": func(rt *rapid.T) {
				if len(out) == 0 {
					rt.Skip("nothing out")
				}
				i := rapid.IntRange(0, len(out)-1).Draw(rt, "call")
				tk := out[i]
				out = append(out[:i], out[i+1:]...)
				o := Outcome(rapid.IntRange(int(Succeeded), int(Unsent)).Draw(rt, "outcome"))
				// The probe out, and not yet given up on (a report after
				// ProbeTimeout is a stale probe's).
				wasProbe := tk.probe != 0 && tk.probe == b.probe && clk.Now() < b.probeBy
				b.Report(tk, o, errDown)
				_, open := b.OpenFor()
				switch {
				case o == Succeeded && open:
					rt.Fatal("a success left the circuit open")
				case wasProbe && o == Unsent:
					if _, ok := b.Allow(); !ok {
						rt.Fatal("an unsent probe did not hand its turn to the next call")
					} else {
						// That call was let through: it is out too, and
						// no call is refused since.
						out, refusedSince = append(out, Ticket{started: clk.Now(), probe: b.probe}), -1
					}
				case wasProbe && b.probe != 0:
					rt.Fatal("a reported probe is still out")
				}
			},
			"ping": func(*rapid.T) { b.Reachable() },
			"wait": func(rt *rapid.T) {
				clk.Add(time.Duration(rapid.Int64Range(0, int64(2*maxBackoff)).Draw(rt, "wait")))
			},
			"": func(rt *rapid.T) {
				// Liveness from here: after the longest refusal a call goes
				// through, and its success closes the circuit.
				if _, open := b.OpenFor(); !open {
					return
				}
				if b.probe != 0 && b.probeBy > clk.Now()+int64(probeTimeout) {
					rt.Fatalf("probe out with a deadline %v away (timeout %v)", time.Duration(b.probeBy-clk.Now()), probeTimeout)
				}
				if b.probe == 0 && b.until > clk.Now()+int64(maxBackoff+maxBackoff/4) {
					rt.Fatalf("backoff ends %v away (longest %v)", time.Duration(b.until-clk.Now()), maxBackoff+maxBackoff/4)
				}
			},
		})
		clk.Add(longest + time.Nanosecond)
		tk, ok := b.Allow()
		if !ok {
			rt.Fatalf("no call let through %v after the last step", longest)
		}
		b.Report(tk, Succeeded, nil)
		if _, open := b.OpenFor(); open {
			rt.Fatal("a success left the circuit open")
		}
	})
}
