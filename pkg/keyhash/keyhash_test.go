package keyhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// hmacPrefix is the hashed key written plainly: HMAC-SHA256, 48 bits, hex.
func hmacPrefix(secret, key []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(key)
	return hex.EncodeToString(m.Sum(nil)[:Length/2])
}

// TestSumIsHMAC: a Hasher reused for any sequence of keys writes what a
// fresh HMAC of each would, under any secret New takes.
func TestSumIsHMAC(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sec := rapid.SliceOfN(rapid.Byte(), MinSecretBytes, 200).Draw(t, "secret") // past a block: hashed first
		k, err := New(sec)
		if err != nil {
			t.Fatal(err)
		}
		h := k.Hasher()
		for _, key := range rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 300), 1, 5).Draw(t, "keys") {
			var got [Length]byte
			h.Sum(&got, key)
			if want := hmacPrefix(sec, key); string(got[:]) != want {
				t.Fatalf("Sum %s, HMAC %s", got, want)
			}
		}
	})
}

// TestSharedSecret: two Keys of one secret (two replicas) name a bucket
// alike; another secret, a random key and the unkeyed SHA-256 do not.
func TestSharedSecret(t *testing.T) {
	bucket := []byte("\x04edge\x08per-user\x0b192.0.2.10")
	a, _ := New(secret)
	b, _ := New(append([]byte(nil), secret...))
	other, _ := New([]byte("fedcba9876543210fedcba9876543210"))
	sum := sha256.Sum256(bucket)
	name := a.Hash(bucket)
	for _, tc := range []struct {
		what string
		got  string
		same bool
	}{
		{"the same secret", b.Hash(bucket), true},
		{"another secret", other.Hash(bucket), false},
		{"a random key", Random().Hash(bucket), false},
		{"the unkeyed SHA-256", hex.EncodeToString(sum[:Length/2]), false},
	} {
		if (tc.got == name) != tc.same {
			t.Errorf("%s: %s, and %s under the secret", tc.what, tc.got, name)
		}
	}
	if len(name) != Length {
		t.Errorf("%q: want %d hex digits", name, Length)
	}
}

func TestShortSecretRefused(t *testing.T) {
	if _, err := New([]byte("0123456789abcde")); err == nil || !strings.Contains(err.Error(), "15 bytes: want at least 16") {
		t.Fatalf("15 bytes: %v", err)
	}
}

// TestNewCopiesSecret: changing the caller's slice changes no name.
func TestNewCopiesSecret(t *testing.T) {
	sec := append([]byte(nil), secret...)
	k, _ := New(sec)
	before := k.Hash([]byte("k"))
	sec[0] ^= 1
	if k.Hash([]byte("k")) != before {
		t.Fatal("the key changed with the caller's secret")
	}
}

func TestSumAllocatesNothing(t *testing.T) {
	k, _ := New(secret)
	h := k.Hasher()
	key := []byte(strings.Repeat("v", 100))
	var dst [Length]byte
	if n := testing.AllocsPerRun(100, func() { h.Sum(&dst, key) }); n != 0 {
		t.Fatalf("%v allocations a hash", n)
	}
}
