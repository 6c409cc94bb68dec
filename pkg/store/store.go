// Package store defines how tokengate keeps bucket state: a Store decides a
// whole request (several buckets) at once, all or nothing. Package
// storetest is the conformance suite every implementation runs.
//
// # Post-paid items
//
// An item of a post-paid rule (charge: after_response) is a Check or a
// Report (Charge), one of a rule charged every hit (charge: every_hit) a
// Report, of cost 0 too; every other item is Prepaid. A request is decided in two
// steps, each over its items in order (two items with one key are one
// bucket, charged in order):
//
//  1. Reports are charged, first and whatever else the request holds:
//     bucket.Params.Report, at most down to -Version.Params.MaxDebt(), the
//     rest Forgiven. A report is usage already served; it never refuses
//     the request and is never undone.
//  2. The other items, its gates, are decided all or nothing on the
//     balances the reports left, as ever: when every Prepaid cost is
//     covered and every Check finds at least one token (bucket.Params.Check),
//     each Prepaid item is charged; otherwise none is. A Check charges
//     nothing.
//
// Result.Debt is the balance below zero after the item (whole tokens,
// rounded up), Result.Forgiven what of a report was not charged.
//
// # Budgets
//
// An item whose version has a Horizon (bucket.Version.Horizon: a calendar
// budget's, whose params never refill, bucket.NewBudget) is decided like
// any other; its bucket carries no information from Horizon.End(its
// cursor) on, and a store drops it then (its key names its period, so no
// later request asks for it), with its reservations.
//
// # Reservations
//
// A Check with Reserve N > 0 (a rule's reserve, only on a request with an
// ID) holds N tokens for the request: it is covered only while the bucket
// holds N whole tokens (bucket.Params.Decide of N, RetryAfter until it
// does), and when the request is allowed the N are charged at once and a
// reservation of N is recorded under (ID, Key). A second Check with the
// same ID and Key while that reservation lives (a retried check past
// MaxReplays, a repeat of the item in one request) is covered and charges
// nothing more: an ID reserves at most once a bucket.
//
// A Report with an ID settles the reservation recorded under (ID, Key),
// if there is one, in step 1: it is charged its Cost minus N, with the
// usual rules of a report (a refund when negative, capped at capacity;
// down to -MaxDebt, the rest Forgiven), and the reservation is gone, so a
// repeat of the report (past MaxReplays) is charged as a plain report,
// never settled twice (and a Check repeated after that reserves again,
// until its expiry). A Report without a reservation is a plain report.
//
// A reservation never settled is returned, exactly N as a refund is
// (capped at capacity), at its expiry (the Check's Now plus ReserveTTL):
// before anything else of the first decision of its bucket at or after
// that instant, the bucket refilled up to the expiry first, under the
// version it is then decided under. (The order in which reservations
// return does not matter: each adds and caps, as refill does.) A store
// bounds the reservations it holds; one that cannot hold another covers
// the Check as above (N tokens there) but charges and holds nothing.
//
// Every number is an integer; a store that keeps state outside the
// process (Redis) decides exactly what pkg/bucket does.
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"github.com/tokengate/tokengate/pkg/bucket"
)

// MaxItems is the most buckets one request may touch; more is ErrInvalid.
const MaxItems = 64

// MaxReplays is how many times a store answers a request id from memory.
// An id is only as trustworthy as whoever sets it: without this bound a
// client that picks its own id could repeat one allowed request forever
// without being charged. Past it, a repeat is decided (and charged) anew.
const MaxReplays = 3

// ErrInvalid is returned for a request a store refuses to decide (no
// version, too many items); it changes no state.
var ErrInvalid = errors.New("store: invalid request")

// ErrUnavailable is returned, wrapped, by a store that does not try at all
// because its backend is known to be down (an open circuit breaker); it
// changes no state.
var ErrUnavailable = errors.New("store: unavailable")

// Item is one bucket of a request.
type Item struct {
	// Key names the bucket. It may alias a buffer of the caller's that is
	// only valid during Decide; a store that keeps the key copies it.
	Key string
	// Version is the rule's parameter version now in force. A bucket last
	// refilled under an older version of the same rule is brought forward
	// (bucket.Version.Bring) before deciding; one already under a newer
	// version stays there (a bucket never moves back).
	Version *bucket.Version
	// Cost is > 0 to consume, 0 to check only, < 0 to refund; for a
	// Report the usage it reports (< 0: a refund); 0 for a Check.
	Cost int64
	// Charge is how the item is charged: Prepaid (the zero value), or a
	// post-paid rule's Check or Report (see the package comment).
	Charge Charge
	// Reserve, on a Check of a request with an ID, is how many tokens it
	// holds until the report with the same ID settles them (see the
	// package comment); 0 holds nothing. ReserveTTL (ns, > 0 with
	// Reserve) is how long the reservation lives unsettled.
	Reserve, ReserveTTL int64
	// Revision is the revision of the policy the request was matched
	// under (policy.Policy.Revision). Version IDs are numbered per process,
	// so a store shared by several processes (Redis) orders versions by
	// revision first; an in-process store ignores it.
	Revision int64
}

// Charge is how an item is charged.
type Charge uint8

const (
	// Prepaid is charged before the request, if every gate of the request
	// is covered: bucket.Params.Decide.
	Prepaid Charge = iota
	// Check is a post-paid rule's request-time item: covered while the
	// bucket holds at least one token, charging nothing:
	// bucket.Params.Check. Its Cost is 0.
	Check
	// Report is a post-paid rule's usage, reported once served: always
	// charged first, never refusing the request: bucket.Params.Report.
	Report
	numCharges
)

// Decide is the bucket arithmetic of an item of charge c and cost on a
// bucket of params p at now.
func (c Charge) Decide(p bucket.Params, s bucket.State, now, cost int64) (bucket.State, bucket.Result) {
	switch c {
	case Check:
		return p.Check(s, now)
	case Report:
		return p.Report(s, now, cost)
	}
	return p.Decide(s, now, cost)
}

// Request is everything one decision needs.
type Request struct {
	// Now is the monotonic instant (clock.Clock) read once for the request.
	Now int64
	// ID, when not empty, makes the request idempotent: a repeat of an ID
	// seen within the store's window that asks for the same buckets and
	// costs (the same Fingerprint) gets the first answer and is charged
	// nothing, at most MaxReplays times. The same ID asking for anything
	// else is another request: decided anew and remembered apart, so that
	// its own repeats replay it (a check and then its report, each
	// retried, are each charged once). Every store keys its records by ID
	// and Fingerprint.
	//
	// The service sets it to 16 bytes, a hash of the id the client sent
	// (the first 128 bits of its SHA-256), never to the client's bytes: a
	// client's id may be as long as the gRPC message allows, and a store
	// that keeps an ID keeps it per id for a whole window. A store must
	// still accept an ID of any length from other callers (and may hash it
	// further). Like Item.Key, it may alias a buffer of the caller's that is
	// only valid during Decide; a store that keeps the ID copies it.
	ID    string
	Items []Item
}

// Result is the answer for one item.
type Result struct {
	bucket.Result
	// ResetAfter is the nanoseconds until the bucket is full again.
	ResetAfter int64
}

// Outcome is the answer for the whole request.
type Outcome struct {
	// Allowed: every gate (every item but the reports) was covered and
	// each Prepaid item charged. Otherwise none was. Reports are charged
	// either way and do not change it.
	Allowed bool
	// Replayed: the answer is that of an earlier request with the same ID.
	Replayed bool
}

// Ambiguous is implemented by the error of a Decide that may have been
// decided after all: its call to a shared store was sent and timed out, so
// the store may yet charge the request though the caller answers it
// without the store (on_store_error). The caller says once, with Resolve,
// whether it let the request through; a store that learns its call did
// charge refunds the charge of a request that was not let through. A
// caller that never calls Resolve leaves the charge as it is.
type Ambiguous interface {
	error
	Resolve(passed bool)
}

// Store decides requests. Implementations must be safe for concurrent use.
type Store interface {
	// Decide decides all of req's items together: its reports are charged
	// first, whatever else happens; then when every other item's cost is
	// covered each is charged, otherwise none is (refunds and checks
	// included) and Outcome.Allowed is false. results must have room for
	// len(req.Items); results[i] answers req.Items[i]. Two items with the
	// same key are one bucket, charged in order. An error means nothing
	// was decided or charged.
	Decide(ctx context.Context, req *Request, results []Result) (Outcome, error)
}

// Validate reports, wrapping ErrInvalid, a request no store decides: more
// than MaxItems items, fewer results than items, an item without a
// version, of an unknown Charge, a Check with a cost, or a reservation
// that is not a Check's, has no request ID or no positive ReserveTTL.
// Every Store calls it first, so all refuse the same requests.
func Validate(req *Request, results []Result) error {
	if n := len(req.Items); n > MaxItems || len(results) < n {
		return fmt.Errorf("%w: %d items (at most %d, %d results)", ErrInvalid, n, MaxItems, len(results))
	}
	for i := range req.Items {
		it := &req.Items[i]
		switch {
		case it.Version == nil:
			return fmt.Errorf("%w: item %d (%q) has no version", ErrInvalid, i, it.Key)
		case it.Charge >= numCharges:
			return fmt.Errorf("%w: item %d (%q): unknown charge %d", ErrInvalid, i, it.Key, it.Charge)
		case it.Charge == Check && it.Cost != 0:
			return fmt.Errorf("%w: item %d (%q): a check of cost %d (a check costs nothing)", ErrInvalid, i, it.Key, it.Cost)
		case it.Reserve == 0 && it.ReserveTTL == 0:
		case it.Reserve <= 0 || it.ReserveTTL <= 0 || it.Charge != Check || req.ID == "":
			return fmt.Errorf("%w: item %d (%q): a reservation of %d for %dns (only a check of a request with an id reserves, a positive number for a positive time)", ErrInvalid, i, it.Key, it.Reserve, it.ReserveTTL)
		}
	}
	return nil
}

// Fingerprint identifies what a request asks for, its keys, costs and
// charges in order, the same in every process: a repeat of a request id is
// replayed only when its fingerprint is the first one's (MaxReplays). So a
// report never replays the check of the same request id (Envoy sends both
// with one x-request-id), and a check that reserves never replays one that
// does not. A Prepaid item adds nothing for its charge, an item without a
// reservation nothing for it: the fingerprints of pre-paid requests are
// what they always were.
func Fingerprint(items []Item) [16]byte {
	h := sha256.New()
	var b []byte
	for _, it := range items {
		b = strconv.AppendInt(b[:0], int64(len(it.Key)), 10)
		b = append(b, ':')
		b = append(b, it.Key...)
		b = strconv.AppendInt(b, it.Cost, 10)
		if it.Charge != Prepaid {
			b = append(b, '/')
			b = strconv.AppendUint(b, uint64(it.Charge), 10)
		}
		if it.Reserve != 0 {
			b = append(b, '+')
			b = strconv.AppendInt(b, it.Reserve, 10)
		}
		b = append(b, ';')
		h.Write(b)
	}
	var fp [16]byte
	copy(fp[:], h.Sum(nil))
	return fp
}
