package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/metrics"
)

const (
	prepaidPolicy = "domains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h}\n"
	postPaidRule  = "domains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h, charge: after_response}\n"
)

// TestRedisRefusesPostPaid: with --store redis a policy with a post-paid
// rule stops the start, naming the rule and the way out; a reload to one
// keeps the last good policy; a post-paid candidate is no candidate. The
// memory store takes them all.
func TestRedisRefusesPostPaid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(postPaidRule)
	want := `policy.yaml:3: domain "llm" rule "tokens": charge: after_response: post-paid rules need --store memory for now`
	var stderr bytes.Buffer
	err := serve([]string{"--store", "redis", "--redis-addr", "127.0.0.1:1", "--policy", path,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start with --store redis: %v, want an error containing %s", err, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	load := func(args ...string) policySource {
		t.Helper()
		s, err := loadSettings(args)
		if err != nil {
			t.Fatal(err)
		}
		src, err := loadPolicy(ctx, s, clock.NewMonotonic(), metrics.New(prometheus.NewRegistry()), log)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	if p := load("--policy", path).current(); !p.Rule("llm", "tokens").PostPaid() {
		t.Fatal("the memory store refused a post-paid rule")
	}

	write(prepaidPolicy)
	src := load("--store", "redis", "--redis-addr", "127.0.0.1:1", "--policy", path)
	good := src.current()
	write(postPaidRule)
	if err := src.file.Reload(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("reload to a post-paid rule with --store redis: %v", err)
	}
	if src.current() != good {
		t.Fatal("the refused policy serves")
	}

	s, err := loadSettings([]string{"--store", "redis", "--redis-addr", "127.0.0.1:1", "--candidate-policy", path})
	if err != nil {
		t.Fatal(err)
	}
	cand, err := loadCandidate(ctx, s, clock.NewMonotonic(), prometheus.NewRegistry(), keyhash.Random(), log)
	if err != nil {
		t.Fatal(err)
	}
	if p := cand.file.Current(); p != nil {
		t.Fatalf("a post-paid candidate policy loaded with --store redis: %s", p.Summary())
	}
}
