// Package candidate keeps the record of a candidate policy (tokengate
// serve --candidate-policy): every request is decided under the
// live policy, which answers, and under the candidate on buckets of its own
// (pkg/service decides both); a Tracker hears both decisions of each
// request and keeps what an operator needs to judge the candidate before
// it goes live:
//
//   - tokengate_candidate_decisions_total{domain,rule,result}, with the
//     results of tokengate_decisions_total;
//   - tokengate_candidate_disagreements_total{domain,kind}: requests one
//     policy allowed and the other rejected, both from their stores'
//     answers (a request either store failed is not compared: its answer
//     says nothing of the limits; nor is one that either policy reads as
//     a post-paid rule's report, whose answer Envoy ignores: Decision.Report);
//   - per rule, the live and candidate decisions side by side (and how
//     many were reports), since the candidate was loaded, and the buckets that disagree most: a
//     space-saving top list of at most Options.TopBuckets entries, keyed
//     by the keyed hash of the bucket key that the live service's
//     decision log and metadata show (Options.KeyHash; never the
//     client's values), each with its count and the most it may
//     overcount by;
//   - a log line, at most once per Options.LogEvery of the injected
//     clock, summarising the disagreements since the one before.
//
// View is the JSON of /debug/candidate. A new candidate starts a fresh
// record; the live policy changing does not.
//
// A Tracker is safe for concurrent use. Observe counts with atomics; only
// a disagreement takes the top list's lock.
package candidate
