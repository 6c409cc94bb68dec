package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const reserveRule = "request_id_key: request_id\ndomains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h, charge: after_response, reserve: 100}\n"

// TestRedisRefusesReserve: with --store redis a policy with a reserve rule
// stops the start, naming the rule and the way out, whatever the Redis
// store decides of post-paid rules; the memory store's compiler takes it.
func TestRedisRefusesReserve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(reserveRule), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `policy.yaml:4: domain "llm" rule "tokens": reserve: reservations need --store memory for now`
	var stderr bytes.Buffer
	err := serve([]string{"--store", "redis", "--redis-addr", "127.0.0.1:1", "--policy", path,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start with --store redis: %v, want an error containing %s", err, want)
	}
	p, err := newCompiler(settings{Store: "memory"}, nil).Compile(path, []byte(reserveRule), nil, 0)
	if err != nil || !p.Rule("llm", "tokens").Reserves() {
		t.Fatalf("the memory store's compiler: %v", err)
	}
}
