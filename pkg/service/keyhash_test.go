package service

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/policy"
)

// TestKeyHashReplicas: the bucket in the metadata and the decision log is
// the keyed hash of its key: two Services (two replicas) given one secret
// name it alike, and as tokengate explain does (keyhash of the rule's
// AppendKey); another secret, a random one (no KeyHash) and the unkeyed
// SHA-256 of the key do not.
func TestKeyHashReplicas(t *testing.T) {
	secret := "a secret of 32 bytes, for tests."
	shared := mustKey(t, secret)
	// The key of the client 192.0.2.10 under the rule per-user.
	entries := []policy.Entry{{Key: "user_id", Value: "192.0.2.10"}}
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	key := pol.Match("edge", entries).AppendKey(nil, entries)
	unkeyed := sha256.Sum256(key)

	limited := func(k *keyhash.Key) (meta, logged string) {
		t.Helper()
		c := &capture{level: slog.LevelInfo}
		f := newFixtureWith(t, testPolicy, memoryStore, func(o *Options) {
			o.KeyHash = k
			o.DecisionLog = DecisionLog{Logger: slog.New(c)}
		})
		d := descr("user_id", "192.0.2.10")
		for range 5 { // capacity 5: the sixth is limited
			f.call(t, 0, d)
		}
		meta = f.call(t, 0, d).DynamicMetadata.GetFields()[MetaKey].GetStringValue()
		lines := c.take()
		if len(lines) == 0 {
			t.Fatal("no decision log line for a refusal")
		}
		return meta, lines[len(lines)-1][MetaKey]
	}
	a, aLog := limited(shared)
	b, _ := limited(mustKey(t, secret))
	o, _ := limited(mustKey(t, "another secret, of 32 bytes too."))
	r, _ := limited(nil)
	if a != aLog || len(a) != keyhash.Length {
		t.Fatalf("metadata key %q, decision log key %q: want one name of %d digits", a, aLog, keyhash.Length)
	}
	for _, tc := range []struct {
		what string
		got  string
		same bool
	}{
		{"a replica with the same secret", b, true},
		{"explain, given the secret", shared.Hash(key), true},
		{"a replica with another secret", o, false},
		{"a replica with a random secret", r, false},
		{"the unkeyed SHA-256", hex.EncodeToString(unkeyed[:keyhash.Length/2]), false},
	} {
		if (tc.got == a) != tc.same {
			t.Errorf("%s: %q, and %q under the shared secret", tc.what, tc.got, a)
		}
	}
}

func mustKey(t *testing.T, secret string) *keyhash.Key {
	t.Helper()
	k, err := keyhash.New([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKeyHashAllocatesNothing: naming a bucket costs the metadata and the
// decision log no allocation of its own.
func TestKeyHashAllocatesNothing(t *testing.T) {
	pol, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rs := &reqState{keyHasher: keyhash.Random().Hasher()}
	rs.plan(pol, "edge", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}, 0, 0)
	var dst [keyhash.Length]byte
	if n := testing.AllocsPerRun(100, func() {
		if !rs.keyHashTo(&dst, 0) {
			t.Fatal("no bucket key")
		}
	}); n != 0 {
		t.Fatalf("%v allocations to hash a key", n)
	}
}
