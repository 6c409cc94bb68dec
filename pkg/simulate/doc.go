// Package simulate replays a trace of rate-limit requests through a policy
// offline (`tokengate simulate`): through the decision path itself,
// pkg/service on a memory store, on a clock.Fake that each request sets to
// its own instant. Nothing sleeps and nothing is approximated: a trace of a
// million requests takes about a second, and the same trace and policy
// always decide the same (while the trace has fewer distinct buckets than
// the store's cap, Options.MaxBuckets).
//
// # Traces
//
// CSV with a header row t,domain,entries,hits (hits may be left out):
//
//	t,domain,entries,hits
//	0,edge,user=alice,
//	0.25,edge,user=alice|user=alice;path=/export,
//	1.5,edge,user=alice,-3
//
// t is seconds from the start of the trace, a plain decimal read exactly to
// the nanosecond (ParseSeconds); requests are in time order. entries are a
// request's descriptors separated by "|", each descriptor's entries by ";",
// each entry key=value (the value is what follows the first "="; a value
// with "|" or ";" needs JSON lines). hits, when set, is every descriptor's
// hits_addend (0 checks only); negative is a refund of that many tokens
// (is_negative_hits); empty is each rule's cost. Separated by "|", it is
// each descriptor's own, in order, empty for none ("|5000": none for the
// first, a report of 5000 for the second). Fields may be quoted as CSV
// allows; lines starting with "#" are comments. A request id is a
// descriptor, as Envoy sends it: the policy's request_id_key alone
// (request_id=r1|user=alice), so a check and then a report with one id
// replay reservations (and idempotent repeats) exactly.
//
// JSON lines, one request an object, told apart by a first "{":
//
//	{"t":0.25,"domain":"edge","descriptors":[[{"key":"user","value":"alice"}]],"hits":-3}
//
// t may also be a string ("0.25"), hits may be left out or null, or a
// list of one per descriptor (null: none); other fields are ignored, so
// access logs that carry these fields replay as they are. A bad line stops the replay with an error naming the trace,
// the line and what is wrong; so does a request the service itself
// refuses as malformed (an empty domain, more than 64 descriptors).
//
// # Counts
//
// Every descriptor a rule matched is counted once per rule (RuleResult):
// allowed, rejected, refused (never passable), blocked (another descriptor
// of the request was denied, so nothing was charged: all or nothing) or a
// refund; a shadow rule is counted like the others although it never
// denies. A report of a post-paid rule, and a hit of an every_hit rule,
// is charged whatever the rest of its request says, so it is never
// blocked: allowed when it left its bucket at zero or above, rejected
// (answered OVER_LIMIT, charged all the same) when in debt. Beside them:
// the checks and reports among them, the checks rejected in debt, the
// tokens charged and forgiven (beyond max_debt), the lowest balance a
// decision left. FirstDry is the first instant a bucket of the rule was
// left with fewer tokens than the rule's cost (a post-paid rule's: than a
// check needs). The counts come from the store's own answers, item by
// item, seen through a recorder in front of the memory store
// (recorder.go).
//
// # Several policies and the hottest buckets
//
// Run replays one trace through several policies in step, each on buckets
// and a clock of its own (--compare). With RunOptions.Hot it replays the
// trace a second time to follow the buckets that decided most in the
// first, recording their lowest balance per second (negative in debt);
// WritePNG draws both.
//
// A Simulator is not safe for concurrent use.
package simulate
