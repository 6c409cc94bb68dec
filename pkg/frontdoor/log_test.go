package frontdoor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/metrics"
)

// lockedBuffer is a log's output, written by the handler's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestForwardAuthFloodLogBounded: a flood of forward-auth requests that
// are not decided, each naming a 60 KB domain, over real HTTP, writes
// logPerSecond short lines a second, not a 60 KB line per request; the
// first line after the budget says how many were dropped, and the client
// reads the domain clipped too.
func TestForwardAuthFloodLogBounded(t *testing.T) {
	f := newFixture(t, testPolicy)
	var out lockedBuffer
	d, err := New(Options{
		Service: f.doors.opts.Service, Policy: f.doors.opts.Policy, Metrics: metrics.NewFrontDoors(prometheus.NewRegistry()),
		Logger: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), Clock: f.clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.ForwardAuth())
	defer srv.Close()
	domain := strings.Repeat("d", 60_000)
	url := srv.URL + ForwardAuthPath + "?domain=" + domain
	get := func() string {
		t.Helper()
		resp, err := srv.Client().Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400: %.200s", resp.StatusCode, body)
		}
		return string(body)
	}
	const requests = 1000
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				get()
			}
		}()
	}
	for range requests {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	if n := out.len(); n >= 50_000 {
		t.Fatalf("%d requests wrote %d bytes of log, want under 50 KB", requests, n)
	}
	lines := out.lines(t)
	if len(lines) != logPerSecond {
		t.Fatalf("%d lines, want %d (the budget of a second)", len(lines), logPerSecond)
	}
	const clipped = "…(60000 bytes)"
	if e, _ := lines[0]["error"].(string); !strings.Contains(e, clipped) || len(e) > 300 {
		t.Fatalf("first line's error %q: want the domain clipped", e)
	}
	f.clk.Add(time.Second)
	if body := get(); !strings.Contains(body, clipped) || len(body) > 300 {
		t.Fatalf("body %.300q: want the domain clipped", body)
	}
	lines = out.lines(t)
	if last := lines[len(lines)-1]; last["dropped"] != float64(requests-logPerSecond) {
		t.Fatalf("a second later: %v, want dropped %d", last, requests-logPerSecond)
	}
}
