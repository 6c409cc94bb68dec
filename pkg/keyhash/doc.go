// Package keyhash names a bucket where tokengate shows one (Envoy's
// dynamic metadata, the decision log, /debug/candidate, tokengate explain)
// without showing the client's values: the first 48 bits of the HMAC-SHA256
// of the bucket key under a per-deployment secret, in hex (Length digits).
//
// An unkeyed hash of a key built from a low-entropy value (an IPv4
// address, a user id) is undone by trying every value; without the secret
// there is nothing to try against. Replicas that share the secret show the
// same name for the same bucket, so a line of one replica's log finds the
// bucket in another's; a Random key names buckets for one process only.
//
// The secret is the key of the HMAC and nothing else: whoever holds it can
// again recover values by trying, so it is kept as a credential is.
//
// A Key is immutable and safe for concurrent use. A Hasher is one
// goroutine's: it holds the HMAC's state, precomputed once from the key
// (the inner and outer pads' compressions, as FIPS 198-1 allows), so a
// hash costs one compression more than a plain SHA-256 and no allocation.
package keyhash
