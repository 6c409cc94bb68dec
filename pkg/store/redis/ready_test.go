package redis

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
)

// TestLazyReady: until Redis has answered once, Ready says why not (the
// latest connect's error); once it has, Ready is nil for good, also after
// Redis is lost, which only Health reports.
func TestLazyReady(t *testing.T) {
	srv := redistest.Start(t)
	o := &opening{t: t, srv: srv}
	l := o.open()
	defer l.Close()
	if err := l.Ready(); err == nil || err.Error() != "redis has not answered since the start: down" {
		t.Fatalf("Ready before Redis answered: %v", err)
	}
	f := func(context.Context) {}
	o.connect.Store(&f)
	poll.Eventually(t, 5*time.Second, l.Ready, "ready once Redis answered")
	srv.Stop()
	poll.Eventually(t, 5*time.Second, func() bool { return l.Health(context.Background()) != nil }, "Health to say Redis is lost")
	if err := l.Ready(); err != nil {
		t.Fatalf("Ready with Redis lost after it answered: %v", err)
	}
	l.Close()
	if err := l.Ready(); err != nil {
		t.Fatalf("Ready after Close, having answered: %v", err)
	}
}

// TestOpenNotReady: settings wrong in themselves stop Open; credentials a
// real Redis refuses do not: the store is not ready, says why, and gets
// ready by itself once Redis takes them, without a new Open.
func TestOpenNotReady(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	if _, err := Open(context.Background(), OpenOptions{Conn: redisconn.Config{Addr: "127.0.0.1:1", CAFile: missing}}); !errors.Is(err, redisconn.ErrConfig) {
		t.Fatalf("Open with a missing CA file: %v, want ErrConfig", err)
	}
	srv := redistest.Start(t, "--requirepass", "s3cret")
	l, err := open(context.Background(), OpenOptions{
		Conn:  redisconn.Config{Addr: srv.Addr(), Password: "other"},
		Store: Options{Timeout: testTimeout, Logger: slog.New(slog.DiscardHandler)},
	}, func(_ context.Context, cfg redisconn.Config) (rueidis.Client, error) { return redisconn.Dial(cfg) }, 10*time.Millisecond)
	if err != nil {
		t.Fatalf("Open against a Redis refusing the password: %v", err)
	}
	defer l.Close()
	err = l.Ready()
	if err == nil || !errors.Is(err, redisconn.ErrConfig) || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("Ready with the password refused: %v", err)
	}
	admin, err := redisconn.Dial(redisconn.Config{Addr: srv.Addr(), Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Do(context.Background(), admin.B().ConfigSet().ParameterValue().ParameterValue("requirepass", "other").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, l.Ready, "ready once Redis takes the password")
}
