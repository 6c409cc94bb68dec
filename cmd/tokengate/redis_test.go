package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/service"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

func TestRedisSettings(t *testing.T) {
	t.Setenv("TOKENGATE_REDIS_PASSWORD", "from-env")
	t.Setenv("TOKENGATE_REDIS_TIMEOUT", "7ms")
	t.Setenv("TOKENGATE_REDIS_CLUSTER", "true")
	s, err := loadSettings([]string{"--store", "redis", "--redis-addr", "a:1,b:2", "--redis-pool-size", "8", "--redis-local-share", "0.25"})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Redis
	if s.RedisAddr != "a:1,b:2" || r.Password != "from-env" || r.Timeout != 7*time.Millisecond || !r.Cluster ||
		r.PoolSize != 8 || r.LocalShare != 0.25 || r.KeyPrefix != "tokengate:" {
		t.Fatalf("got %+v %+v", s, r)
	}
	for _, args := range [][]string{
		{"--redis-timeout", "0s"}, {"--redis-local-share", "0"}, {"--redis-local-share", "2"},
		{"--redis-cluster", "--redis-sentinel-master", "m"}, {"--redis-cluster", "--redis-db", "1"}, {"--redis-pool-size", "-1"},
	} {
		if _, err := loadSettings(append([]string{"--store", "redis"}, args...)); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	// The memory store ignores the Redis settings.
	if _, err := loadSettings([]string{"--redis-local-share", "2"}); err != nil {
		t.Errorf("--store memory refused a Redis setting: %v", err)
	}
}

// TestRedisFlags: every field redisFlags names is a field of
// redisconn.Config, and every flag it names is a setting.
func TestRedisFlags(t *testing.T) {
	flags := map[string]bool{}
	for _, st := range settingsTable {
		flags["--"+st.name] = true
	}
	for field, flag := range redisFlags {
		if _, ok := reflect.TypeFor[redisconn.Config]().FieldByName(field); !ok {
			t.Errorf("redisFlags names %s, not a field of redisconn.Config", field)
		}
		if !flags[flag] {
			t.Errorf("redisFlags names %s for %s, not a setting", flag, field)
		}
	}
}

// TestRedisTimeoutDefault: 15ms, so that on_store_error answers within
// Envoy's default rate_limit timeout of 20ms, gRPC round trip included.
func TestRedisTimeoutDefault(t *testing.T) {
	s, err := loadSettings([]string{"--store", "redis"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis.Timeout != 15*time.Millisecond {
		t.Fatalf("--redis-timeout defaults to %v, want 15ms", s.Redis.Timeout)
	}
}

// TestServeRedisPasswordFile: tokengate serves from a Redis that wants a
// password, read from --redis-password-file; with the wrong one it is not
// ready, saying why, and never logs the password.
func TestServeRedisPasswordFile(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	file := filepath.Join(t.TempDir(), "password")
	for _, password := range []string{"wrong", "s3cret"} {
		if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		be, tap := openRedisT(t, "--redis-addr", srv.Addr(), "--redis-password-file", file)
		err := be.ready()
		if password == "s3cret" {
			if err != nil {
				t.Fatalf("the right password: not ready: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "refused the credentials: set the user name (--redis-username) and password (--redis-password-file) it expects") {
			t.Fatalf("wrong password: ready %v", err)
		}
		if strings.Contains(err.Error(), password) || strings.Contains(tap.text(), password) {
			t.Fatal("the password was logged")
		}
	}
}

// openRedisT is openRedis with serve's settings for --store redis and
// args, until the test ends, logging to the returned tap.
func openRedisT(t *testing.T, args ...string) (*backend, *logTap) {
	t.Helper()
	s, err := loadSettings(append([]string{"--store", "redis", "--redis-dial-timeout", "300ms"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	tap := newLogTap()
	ctx, cancel := context.WithCancel(context.Background())
	be, err := openRedis(ctx, s, prometheus.NewRegistry(), clock.NewMonotonic(), slog.New(tap))
	if err != nil {
		cancel()
		t.Fatalf("%v stopped the start: %v", args, err)
	}
	t.Cleanup(func() { cancel(); be.close() })
	return be, tap
}

// TestServeRedisConfigErrors: tokengate exits 1 at start, naming the flag
// and the file, when the Redis settings are wrong in themselves.
func TestServeRedisConfigErrors(t *testing.T) {
	srv := redistest.StartTLS(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	noPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(noPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"CA file missing", []string{"--redis-addr", srv.TLSAddr(), "--redis-ca-file", missing},
			[]string{"--redis-ca-file: open " + missing + ": no such file or directory"}},
		{"CA file unreadable", []string{"--redis-addr", srv.TLSAddr(), "--redis-ca-file", dir},
			[]string{"--redis-ca-file: read " + dir + ": is a directory"}},
		{"CA file without PEM", []string{"--redis-addr", srv.TLSAddr(), "--redis-ca-file", noPEM},
			[]string{"--redis-ca-file " + noPEM + ": no PEM certificate in it"}},
		{"unix URL without a path", []string{"--redis-url", "unix://" + srv.Addr()},
			[]string{`--redis-url "unix://` + srv.Addr() + `" has no socket path`}},
		{"a socket path as the address", []string{"--redis-addr", "/run/redis.sock"},
			[]string{`--redis-addr "/run/redis.sock": want host:port (a Unix socket is --redis-url unix:///path/to/redis.sock)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--store", "redis", "--redis-dial-timeout", "300ms",
				"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)
			var stdout, stderr bytes.Buffer
			exit := make(chan int, 1)
			go func() { exit <- run(args, &stdout, &stderr) }()
			select {
			case code := <-exit:
				if code != 1 {
					t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatal("still running after 20s: it started serving") // the leaked server ends with the test binary
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), "tokengate: --store redis: redis: ") || !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// TestRedisRefusesSettings: settings that real Redis processes on TLS and
// plaintext ports refuse do not stop the start: tokengate is not ready,
// the reason (naming the flag and the address) in one log line and on
// Ready, as it keeps connecting, until Redis or the settings on its side
// change.
func TestRedisRefusesSettings(t *testing.T) {
	srv := redistest.StartTLS(t)
	other := redistest.StartTLS(t) // signed by another CA
	mutual := redistest.StartTLS(t, "--tls-auth-clients", "yes")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"CA of another server", []string{"--redis-addr", srv.TLSAddr(), "--redis-ca-file", other.CAFile},
			srv.TLSAddr() + ": its TLS certificate is not signed by a CA in --redis-ca-file " + other.CAFile},
		{"client certificate required", []string{"--redis-addr", mutual.TLSAddr(), "--redis-ca-file", mutual.CAFile},
			mutual.TLSAddr() + " refused TLS (remote error: tls: certificate required): if Redis wants a client certificate, set its tls-auth-clients to no or optional"},
		{"TLS against a plaintext port", []string{"--redis-addr", srv.Addr(), "--redis-ca-file", srv.CAFile},
			srv.Addr() + " is a plaintext port but TLS is on (--redis-ca-file): point --redis-addr at Redis's TLS port"},
		{"rediss:// against a plaintext port", []string{"--redis-url", "rediss://" + srv.Addr(), "--redis-ca-file", srv.CAFile},
			srv.Addr() + " is a plaintext port but TLS is on (--redis-ca-file): point --redis-url at Redis's TLS port"},
		{"plaintext against a TLS port", []string{"--redis-addr", srv.TLSAddr()},
			srv.TLSAddr() + " speaks TLS but TLS is off: set --redis-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be, tap := openRedisT(t, tc.args...)
			if err := be.ready(); err == nil || !strings.Contains(err.Error(), "redis has not answered since the start: redis: "+tc.want) {
				t.Errorf("ready: %v, want it to say %q", err, tc.want)
			}
			lines := tap.lines("redis refuses tokengate's settings: not ready until it answers; connecting in the background")
			if len(lines) != 1 || !strings.Contains(attr(lines[0], "error").String(), tc.want) {
				t.Errorf("logged %d lines saying so, want one naming %q:\n%s", len(lines), tc.want, tap.text())
			}
			if len(tap.lines("redis unreachable at start: not ready until it answers; connecting in the background")) != 0 {
				t.Errorf("a configuration error was logged as Redis unreachable:\n%s", tap.text())
			}
		})
	}
}

// TestRedisDownAtStart: with Redis down at start, plaintext or TLS, the
// Redis backend is built anyway (store unhealthy and not ready, logged
// unreachable) and connects in the background once Redis is up, without
// a restart; it is ready from then on.
func TestRedisDownAtStart(t *testing.T) {
	srv := redistest.StartTLS(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plaintext", []string{"--redis-addr", srv.Addr()}},
		{"TLS", []string{"--redis-addr", srv.TLSAddr(), "--redis-ca-file", srv.CAFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Stop()
			be, tap := openRedisT(t, tc.args...)
			if err := be.health(); err == nil {
				t.Fatal("store healthy with Redis down")
			}
			if err := be.ready(); err == nil || !strings.Contains(err.Error(), "redis has not answered since the start") {
				t.Fatalf("ready with Redis down at start: %v", err)
			}
			if len(tap.lines("redis unreachable at start: not ready until it answers; connecting in the background")) != 1 {
				t.Error("Redis down at start was not logged as unreachable")
			}
			srv.Restart()
			tap.waitFor(t, "redis store connected")
			if err := be.health(); err != nil {
				t.Fatalf("store unhealthy once connected: %v", err)
			}
			if err := be.ready(); err != nil {
				t.Fatalf("not ready once connected: %v", err)
			}
		})
	}
}

// logTap is a slog handler that keeps every record and hands its message
// to waitFor, so that a test waits for a line on a channel.
type logTap struct {
	mu      sync.Mutex
	records []slog.Record
	msgs    chan string
}

func newLogTap() *logTap { return &logTap{msgs: make(chan string, 10_000)} }

func (l *logTap) Enabled(context.Context, slog.Level) bool { return true }
func (l *logTap) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logTap) WithGroup(string) slog.Handler            { return l }

func (l *logTap) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	l.mu.Unlock()
	select {
	case l.msgs <- r.Message:
	default:
	}
	return nil
}

// waitFor waits up to 10s for a record with message msg.
func (l *logTap) waitFor(t *testing.T, msg string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-l.msgs:
			if m == msg {
				return
			}
		case <-timeout:
			t.Fatalf("no %q logged within 10s", msg)
		}
	}
}

// text is every record, a line each: message and attributes.
func (l *logTap) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
		b.WriteByte('\n')
	}
	return b.String()
}

// lines returns the records with message msg.
func (l *logTap) lines(msg string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.records {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// TestRedisOutageLogs: the Redis backend serve builds logs Redis lost and
// back once each with no traffic, and 1,000 decisions failing in one
// outage are one line, the next line counting the 999 held back.
func TestRedisOutageLogs(t *testing.T) {
	srv := redistest.Start(t)
	s, err := loadSettings([]string{"--store", "redis", "--redis-addr", srv.Addr(), "--redis-timeout", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	s.Redis.WatchEvery = 5 * time.Millisecond
	tap := newLogTap()
	log := slog.New(tap)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	be, err := openRedis(ctx, s, prometheus.NewRegistry(), clock.NewMonotonic(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	pol, err := policy.Parse("outage.yaml", []byte("domains:\n  edge:\n    - {name: per-user, match: [{key: user_id}], capacity: 5, refill: 1/s, on_store_error: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol.Activate()
	clk := new(clock.Fake)
	svc, err := service.New(service.Options{
		Policy: func() *policy.Policy { return pol }, Store: be.store, Local: be.local, StoreName: be.name,
		Metrics: metrics.New(prometheus.NewRegistry()), Clock: clk, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	decide := func() {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "u"}}},
		}}
		if r, err := svc.ShouldRateLimit(ctx, req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("with Redis down: %v, %v; want OVER_LIMIT (on_store_error deny)", r, err)
		}
	}

	srv.Stop()
	tap.waitFor(t, "redis lost")
	for range 1000 {
		decide()
		clk.Add(time.Millisecond)
	}
	clk.Add(10 * time.Second)
	decide()
	srv.Restart()
	tap.waitFor(t, "redis back")
	cancel()
	be.close()

	for msg, want := range map[string]int{"redis lost": 1, "redis back": 1, "store failed; rules' on_store_error decides": 2} {
		if got := len(tap.lines(msg)); got != want {
			t.Errorf("%q logged %d times, want %d", msg, got, want)
		}
	}
	if failed := tap.lines("store failed; rules' on_store_error decides"); len(failed) == 2 {
		if n := attr(failed[1], "suppressed").Int64(); n != 999 {
			t.Errorf("the second failure line counts %d held back, want 999", n)
		}
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	// Connected, lost, two failure lines, circuit open, back: a few lines
	// for 1,001 failed decisions (once a line each), with some room.
	if len(tap.records) > 10 {
		for _, r := range tap.records {
			t.Logf("%s %s", r.Level, r.Message)
		}
		t.Errorf("%d lines for one outage, want a few", len(tap.records))
	}
}
