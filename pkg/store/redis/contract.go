//lint:file-ignore U1000 some constants are used only by the Lua, through lua/contract.lua (TestLuaNames fails on one no Lua file uses)

package redis

// The contract between the store and its Lua script: every position,
// separator and constant the two sides share is defined here, once, as a
// Go constant, and each constant here is a local of the script's first
// file, lua/contract.lua, named in upper case (argIDMode is ARG_ID_MODE).
// A name is added here and nowhere else:
//
//   - lua/contract.lua is generated from this file by go generate (the
//     generator is TestLuaContractFresh, which reads these declarations
//     with go/types) and checked in; the same test fails when it is
//     stale. Generated rather than built at init from one table, because
//     that table could not also be the Go constants (a table's values
//     are not constants, and these size arrays in reply.go): it would be
//     a second list beside them. The generator lives in the test that
//     checks its output, so nothing of it is in the binary.
//   - TestLuaNames fails when a Lua file uses a name that is defined
//     neither here nor in Lua (in Lua an undefined name is a global, nil),
//     or a literal KEYS or ARGV position, and when a name here is used by
//     no Lua file: each is one of the chunk's 200 locals (TestLuaLocals
//     holds the chunk to a budget).
//
// A declaration whose doc ends in the directive lua:plus1 holds
// positions in an array the script builds (the reply), which Go counts
// from 0 and Lua from 1: each of its Lua names is the value plus one.
// Every other position is ARGV's, declared as Lua counts it. The file
// holds constants only, integers and strings, that depend on nothing
// else.
//
//go:generate go test -run ^TestLuaContractFresh$ -update

// Arguments (ARGV, 1-based). The header comes first, then itemArgs
// arguments per item (decide and reserve) or settleArgs per bucket
// (settle); a settle that records a request id's answer adds it last.
const (
	argOp         = iota + 1 // opDecide, opReserve or opSettle
	argNow                   // the request's instant on the shared clock, or its own, biased (RequestTime)
	argFloor                 // earliest cursor of a new bucket, biased, or ""
	argExpire                // "1": keys live until full
	argPid                   // this process's identity
	argIDMode                // idNone, idLast (the request id key is the last key), idRelease
	argWindow                // ms a request id's answer is kept
	argPending               // ms a reserve's claim on a request id is kept
	argItems                 // number of items
	argFP                    // fingerprint of the request's buckets and costs (request ids only)
	argMaxReplays            // store.MaxReplays
	argTolerance             // ms of a forward step of the Redis host's clock that keys survive
	argHold                  // the request id as its reservations are named (holdName), or ""
	headerArgs    = iota
)

// Item arguments, offsets within an item's block.
const (
	itemCost    = iota + 1 // signed tokens
	itemAt                 // the version's activation, a signed ns offset back from now
	itemID                 // the version's identity: itemVersion, then pid and version ID, joined by verSep
	itemVersion            // revision, capacity (see debtSep), rate tokens, rate period, each followed by verSep
	itemFast               // capacity, rate tokens, period, max debt as fastFormat, or "" when they do not fit
	itemMode               // on_resize, "clamp" or "scale" (resizeBytes), then the item's charge (see chargeCheck)
	itemChain              // earlier versions (see encodeVersion)
	itemHorizon            // ns from now until the version's buckets expire (bucket.Version.Horizon), or ""
	itemArgs    = iota
)

// fastFormat packs an item's parameters (struct.pack, little-endian
// doubles) when (capacity+max debt)*period < fastLimit, so that the
// plain-number path reads them without parsing decimals.
const fastFormat = "<dddd"

// A version's capacity, in its identity and its chain entries, is the
// capacity alone for a bound of no debt, else the capacity, debtSep and
// the bound (bucket.Params.MaxDebt): the bound is part of the parameters,
// and a bucket of pre-paid parameters keeps the identity it always had.
const debtSep = "+"

// An item's itemMode is its version's on_resize (resizeBytes long)
// followed by its charge (store.Charge): nothing for a pre-paid item,
// chargeCheck or chargeReport for a post-paid rule's. A batch's versions
// are so one per version and charge.
//
// A check that reserves (store.Item.Reserve) is chargeReserve followed by
// its reservation's lifetime (ns, decimal), and its itemCost is the
// tokens it reserves.
const (
	resizeBytes   = 5
	chargeCheck   = "c"
	chargeReport  = "r"
	chargeReserve = "h"
)

// A bucket's reservations (store.go, "Reservations") are one hash, its
// key the bucket's with holdsSuffix (so in its hash slot): a field per
// request id (argHold), its value the tokens held, fieldSep, and the
// instant (decimal, on the script's clock) it expires. A bucket with
// reservations says so in its record: its identity is followed by
// holdSep and an instant at or before the earliest of their expiries, so
// that a decision reads the hash only when one may have expired (and the
// lean path, which never reads it, leaves such a bucket to the general
// one). A record without reservations is as it always was.
const (
	holdsSuffix = ":holds"
	holdSep     = "#"
)

// A bucket is recBytes of little-endian doubles (recFormat: tokens, signed
// (below zero: a debt, floored as bucket.State keeps it), then
// its fraction, its cursor and its version's activation, each as
// h*10^9 + l, then the instant in ms until which its key surely lives)
// followed by its identity (itemID of the version it was decided under).
// Every double is an exact integer below 2^53.
// Its balance (tokens, fraction, cursor) is the first five doubles (recBalanceFormat),
// so that a write of the balance alone is a SETRANGE at 0.
const (
	recFormat        = "<dddddddd"
	recBytes         = 8 * (len(recFormat) - 1)
	recBalanceFormat = "<ddddd"
	recBalanceBytes  = 8 * (len(recBalanceFormat) - 1)
)

// Settle arguments, offsets within a bucket's block.
const (
	settleUnits = iota + 1 // units to add back
	settlePer              // the period the units are counted in
	settleNew              // "1": the bucket was new at the reserve
	settleHold             // a rollback's: the tokens of the request's reservation it removes, or ""
	settleArgs  = iota
)

// A batch (batch.go) is several calls as one: its arguments are opBatch,
// the number of calls, of contexts and of versions (batchHead), then each
// context (headerArgs each: a call's header with its per-call fields
// empty, so that its store's constants are sent once), each version
// (itemArgs each: an item's block with itemCost empty, and itemAt the
// version's activation and itemHorizon its horizon's end, or "", on the
// script's clock, signed decimals), one
// argument of each call's key and argument counts (callCountsFormat each;
// the key count is negative when an earlier call of the batch has one of
// the call's keys, so that the call reads its records as the batch left
// them, not from the batch's MGET; a compact call's argument count is
// negative when a later call of the batch has one of its keys, so that
// its lean writes wait for the end of the batch: lua/lean.lua), then each
// call's arguments; its keys are the calls' keys in order. Its reply is
// each call's reply, in order.
//
// A call of one argument is compact (compact.go): a decide without a
// request id, packed as callFormat (its context, its instant h*10^9 + l,
// its floor h*10^9 + l or h = -1 for none, its number of items, 1 when
// its keys are distinct, plus callReserve for a reserve: a cross-node
// request's part, cross.go), then callItemFormat per item (its version,
// its cost). Contexts and versions count from 1. Every other call is
// laid out as alone.
const (
	argBatchCalls    = 2
	argBatchContexts = 3
	argBatchVersions = 4
	batchHead        = 4

	callCountsFormat = "<dd"
	callFormat       = "<ddddddd"
	callItemFormat   = "<dd"
	callReserve      = 2
)

// On a Cluster a batch whose keys span slots is a node call (batch.go):
// one declared key, the routing key (a key of the batch, so that the call
// goes to the node serving its slot), and as arguments opNode and the
// number of runs (nodeHead, the number last), each run's length (keys of
// one slot in a row, read by one MGET: a command may touch one slot), the
// keys (as many as the runs' lengths add up to), then the batch's own
// arguments.
const nodeHead = 2

// Operations and request id modes.
const (
	opDecide  = "d"
	opReserve = "r"
	opSettle  = "s"
	opBatch   = "b"
	opNode    = "n"

	idNone    = "0"
	idLast    = "1"
	idRelease = "2"
)

// The reply is a flat array: replyHead fields, then replyItemFields per
// item. Values are integers below 2^53, or decimal strings for larger
// ones (the bignum path).
//
//lua:plus1
const (
	replyKind    = iota // kindDecided, kindReplay or kindPending
	replyAllowed        // 1 when the request was allowed
	replyForgot         // latest cursor of a full new bucket not stored (RequestTime), biased, or ""
	replySettle         // a reserve's settle entries (see settleEntry)
	replyClaimed        // 1 when a reserve claimed the request id
)

// The number of fields of the reply's head and of each of its items.
const (
	replyHead       = replyClaimed + 1
	replyItemFields = replyExtra2 + 1
)

// A compact call decided by the lean path (lua/lean.lua) answers packed:
// one string of little-endian doubles (packedNumber each), 1 when the
// request was allowed (else 0), then replyItemFields per item, in the
// order below; its head is otherwise that of any decide without a
// request id. Every other reply is the array.
const packedNumber = "d"

// A replay's reply is {kindReplay, record}.
//
//lua:plus1
const replyRecord = 1

// Reply item fields.
//
//lua:plus1
const (
	replyFlags     = iota // flagAllowed | flagNever | flagSnapshot | flagReport
	replyRemaining        // the balance's whole tokens, signed: below zero a debt (Remaining - Debt)
	replyRetry
	replyReset
	// A decide's snapshot of a rejected bucket (flagSnapshot): its
	// uncharged balance's fraction and cursor, counted from the script's
	// now; a reserve's remaining and reset should the request be rejected.
	// A report's (flagReport) are its Forgiven and 0: its answer is the
	// same whatever the request's.
	replyExtra1
	replyExtra2
)

// Reply kinds and item flags.
const (
	kindDecided = 0
	kindReplay  = 1 // the request id's answer, kept from before
	kindPending = 2 // another call with this request id is deciding

	flagAllowed  = 1
	flagNever    = 2
	flagSnapshot = 4 // decided in plain numbers under the item's own version
	flagReport   = 8 // a report (chargeReport): replyExtra1 is its Forgiven
)

// Separators of the text records: an identity (verSep), a version chain
// (chainSep between versions, fieldSep within one), a replay record
// (recordSep between items, fieldSep within one) and settle entries
// (chainSep, fieldSep).
const (
	verSep    = ":"
	chainSep  = ";"
	fieldSep  = ","
	recordSep = "|"
)

// A request id's answer is a hash of these fields; a reserve's claim
// holds idPending as its record until the settle writes the answer.
const (
	idFieldFP     = "fp"
	idFieldLeft   = "left"
	idFieldRecord = "rec"
	idPending     = "pending"
)

// fastLimit bounds every operand and intermediate of the script's plain
// number path (lua/fast.lua): doubles are exact integers below 2^53, and
// 2^52 leaves room for one sum of two such values.
const fastLimit = 1 << 52
