package keyhash

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
)

// Length is the length of a hashed key: 48 bits in hex. It tells buckets
// apart in logs; two buckets of one rule share a name only by chance (one
// pair in 2^48).
const Length = 12

// MinSecretBytes is the shortest secret New accepts: 128 bits, so that the
// secret is not itself the thing to guess.
const MinSecretBytes = 16

// Key is a secret that names buckets (see the package comment).
type Key struct {
	secret []byte
}

// New returns the Key of secret, which it copies; a secret shorter than
// MinSecretBytes is an error.
func New(secret []byte) (*Key, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("the secret is %d bytes: want at least %d", len(secret), MinSecretBytes)
	}
	return &Key{secret: append([]byte(nil), secret...)}, nil
}

// Random returns a Key of 32 random bytes: buckets get names that no other
// process gives them.
func Random() *Key {
	secret := make([]byte, 32)
	rand.Read(secret) // never fails: the runtime ends the program instead
	return &Key{secret: secret}
}

// Hasher returns a Hasher of k.
func (k *Key) Hasher() *Hasher {
	mac := hmac.New(sha256.New, k.secret)
	mac.Reset() // precomputes the pads' states: every later Reset and Sum restores them
	return &Hasher{mac: mac}
}

// Hash is the hashed key as a string, for a caller off the hot path.
func (k *Key) Hash(key []byte) string {
	var dst [Length]byte
	k.Hasher().Sum(&dst, key)
	return string(dst[:])
}

// Hasher hashes keys under one Key. It is not safe for concurrent use.
type Hasher struct {
	mac hash.Hash
	sum [sha256.Size]byte
}

// Sum writes the hashed key into dst. It allocates nothing.
func (h *Hasher) Sum(dst *[Length]byte, key []byte) {
	h.mac.Reset()
	h.mac.Write(key)
	hex.Encode(dst[:], h.mac.Sum(h.sum[:0])[:Length/2])
}
