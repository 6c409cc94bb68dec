package service

import (
	"crypto/sha256"
	"unsafe"
)

// requestID is a request id as the stores see it (store.Request.ID): the
// first 128 bits of the SHA-256 of the id the client sent. It is taken the
// moment the id is read, so no store ever holds the client's bytes: an id
// costs a store the same whether it was 36 bytes or a megabyte, and one
// longer than a descriptor value may be (MaxValueBytes) is no reason to
// refuse a request. 128 bits make a collision (two ids one replay) a matter
// of 2^64 tries, and even then only a repeat asking for the same buckets
// and costs is replayed (store.Fingerprint). Every process hashes alike,
// so ids stay shared through a shared store (Redis).
type requestID [16]byte

// hashRequestID hashes a client's request id; "" stays "no id".
func hashRequestID(id string) (requestID, bool) {
	if id == "" {
		return requestID{}, false
	}
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(id), len(id)))
	return requestID(sum[:16]), true
}

// alias is the id as store.Request.ID carries it, without a copy: like the
// items' keys, which alias the request state's buffer, it is valid while id
// is.
func (id *requestID) alias() string { return unsafe.String(&id[0], len(id)) }
