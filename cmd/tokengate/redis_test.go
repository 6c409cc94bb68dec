package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/redistest"
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
// password, read from --redis-password-file, and refuses to start with the
// wrong one.
func TestServeRedisPasswordFile(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err := serve([]string{"--store", "redis", "--redis-addr", srv.Addr(), "--redis-password-file", file,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(stderr.String()+err.Error(), "wrong") {
		t.Fatal("the password was logged")
	}
}
