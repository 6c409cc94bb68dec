package redis

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// notReadyPolicy names no on_store_error: the default, local, answers
// while Redis is lost, from a budget of 2.
const notReadyPolicy = `
domains:
  edge:
    - {name: per-user, match: [{key: user_id}], capacity: 2, refill: 1/h}
`

// wantNotReady waits until tokengate's readiness (gRPC health "", /readyz)
// says not ready, /readyz naming why.
func wantNotReady(t *testing.T, p *proc, why string) {
	t.Helper()
	tgproc.WaitHealth(t, p.Conn, "", notServing)
	if code, body := p.Get(t, "/readyz"); code != 503 || !strings.Contains(body, "not ready: redis has not answered since the start: ") || !strings.Contains(body, why) {
		t.Errorf("/readyz: %d %q, want 503 saying %q", code, body, why)
	}
}

// TestNotReadyUntilRedisAnswers: misconfigured, tokengate is not an
// outage: a Redis name that does not resolve, a TLS setting or
// credentials Redis refuses keep it unready, /readyz naming the setting;
// once Redis answers it is ready, and it stays ready (degraded, the local
// budget answering) when Redis is killed afterwards.
func TestNotReadyUntilRedisAnswers(t *testing.T) {
	t.Run("unknown host", func(t *testing.T) {
		p := start(t, "--store", "redis", "--redis-addr", "nohost.invalid:6379", "--redis-dial-timeout", "200ms")
		wantNotReady(t, p, `cannot resolve "nohost.invalid": check --redis-addr`)
	})
	t.Run("TLS", func(t *testing.T) {
		srv := redistest.StartTLS(t)
		other := redistest.StartTLS(t)
		p := start(t, "--store", "redis", "--redis-addr", srv.TLSAddr(), "--redis-dial-timeout", "200ms")
		wantNotReady(t, p, srv.TLSAddr()+" speaks TLS but TLS is off: set --redis-ca-file")
		p = start(t, "--store", "redis", "--redis-addr", srv.TLSAddr(), "--redis-ca-file", other.CAFile, "--redis-dial-timeout", "200ms")
		wantNotReady(t, p, "its TLS certificate is not signed by a CA in --redis-ca-file "+other.CAFile)
	})
	t.Run("credentials", func(t *testing.T) {
		srv := redistest.Start(t, "--requirepass", "s3cret")
		file := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(file, []byte("rotated\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := start(t, "--store", "redis", "--redis-addr", srv.Addr(), "--redis-password-file", file,
			"--policy", writeFile(t, notReadyPolicy), "--redis-timeout", "50ms")
		wantNotReady(t, p, "refused the credentials: set the user name (--redis-username) and password (--redis-password-file) it expects")
		if _, body := p.Get(t, "/readyz"); strings.Contains(body, "rotated") {
			t.Errorf("/readyz shows the password: %q", body)
		}

		// Redis takes the password tokengate has: ready, without a restart.
		admin, err := redisconn.Dial(redisconn.Config{Addr: srv.Addr(), Password: "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		err = admin.Do(context.Background(), admin.B().ConfigSet().ParameterValue().ParameterValue("requirepass", "rotated").Build()).Error()
		admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		tgproc.WaitHealth(t, p.Conn, "", serving)
		poll.Eventually(t, tgproc.Timeout, func() bool { return !degraded(p.ask(t, descriptor("user_id", "warm"))) }, "an answer from Redis")
		if code, body := p.Get(t, "/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("/readyz once Redis answered: %d %q", code, body)
		}

		// Lost after it answered: an outage, which on_store_error answers.
		srv.Kill()
		tgproc.WaitHealth(t, p.Conn, "tokengate.store", notServing)
		if got := tgproc.Health(t, p.Conn, ""); got != serving {
			t.Errorf("health \"\" with Redis killed after it answered: %v, want SERVING", got)
		}
		if code, body := p.Get(t, "/readyz"); code != 200 || !strings.HasPrefix(body, "ready; store degraded, on_store_error answering: ") {
			t.Errorf("/readyz with Redis killed after it answered: %d %q", code, body)
		}
		for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
			if r := p.ask(t, descriptor("user_id", "lost")); r.OverallCode.String() != want || !degraded(r) {
				t.Errorf("#%d with Redis killed: %v, want %s marked degraded (on_store_error local, a budget of 2)", i, r, want)
			}
		}
	})
}
