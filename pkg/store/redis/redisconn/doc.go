// Package redisconn connects to Redis for the Redis store and watches
// the connection: it knows a rueidis.Client and nothing of the store.
//
//   - Dial (dial.go) connects to a single node, through Sentinel, or to a
//     Cluster, with TLS and mTLS as Config says. An error that no retry
//     fixes until a setting changes (a bad CA file, TLS on one side only,
//     a wrong password, an address that is not the Cluster asked for) is
//     ErrConfig and names the field of Config to change (explain.go probes
//     an address once more to tell which side is wrong); any other error
//     is an outage. Check finds, without connecting, the ErrConfig that
//     only this side can fix (a URL that does not parse, a CA file that
//     does not read).
//     Errors call a field by its Go name, or by the name Config.Names
//     gives it (cmd/tokengate gives its flags).
//   - CheckLimits and CountKeys (limits.go) read whether Redis bounds
//     tokengate's keys safely (maxmemory and an eviction policy by time
//     until full) and how many keys it holds.
//   - Ping and Watch (watch.go) check that Redis answers, and log each
//     change of reachability once, with traffic or without.
//
// The store sets its metrics from what these return, and passes what a
// watch does while Redis answers as a function; so this package imports
// nothing of the store's, and the store imports it.
//
// Every function is safe for concurrent use; Watch runs until its context
// ends, in the caller's goroutine.
package redisconn
