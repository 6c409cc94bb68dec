// Package xds takes the policy from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW and as Envoy
// Gateway serves it: state of the world over the aggregated discovery
// service (ADS), resources of type
// ratelimit.config.ratelimit.v3.RateLimitConfig (TypeURL), one domain
// each, subscribed to all (no resource names), the node identified by
// Options.NodeID and NodeMetadata, in plaintext, TLS or mTLS.
//
// Each response is the whole set: its configs are rendered as files of
// the reference format (convert.go) and go through the same versioned
// transition as a reload of policy files (watch.Publisher): compiled
// against the policy serving with the process's one policy.Compiler,
// activated, then served; logged and counted as a reload under the
// policy source "xds://host:port". A response that validates is ACKed
// with its version; one that does not (or does not decode) is NACKed with
// the errors in error_detail, and the last good config keeps serving. A
// lost stream is opened again after a bounded, jittered exponential
// backoff, asking for the whole state, so that a restarted server resyncs
// the client; content that already serves is only ACKed.
//
// Until the first config the client serves a policy with no domain
// (every request OK) and is not Ready, unless Options.ForceStart.
//
// Current and Ready are safe for concurrent use; Run runs once.
package xds
