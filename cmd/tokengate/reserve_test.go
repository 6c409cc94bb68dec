package main

import "testing"

const reserveRule = "request_id_key: request_id\ndomains:\n  llm:\n    - {name: tokens, match: [{key: user_id}], capacity: 1000, refill: 1000/h, charge: after_response, reserve: 100}\n"

// TestCompilerTakesReserve: a reserve rule compiles for either store, the
// Redis store holding reservations as the memory store does.
func TestCompilerTakesReserve(t *testing.T) {
	for _, st := range []string{"memory", "redis"} {
		p, err := newCompiler(settings{Store: st}, nil).Compile("policy.yaml", []byte(reserveRule), nil, 0)
		if err != nil || !p.Rule("llm", "tokens").Reserves() {
			t.Fatalf("--store %s: %v, want the reserve rule compiled", st, err)
		}
	}
}
