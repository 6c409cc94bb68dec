// Package policy reads tokengate's YAML policy file, validates it, and
// compiles it into an immutable matcher from Envoy rate-limit descriptors to
// rules with token-bucket parameters.
//
// # The file
//
//	revision: 3                  # optional; raise it on every edit
//	request_id_key: request_id   # optional: the descriptor key carrying the request id
//	domains:
//	  edge:                      # Envoy's rate_limit filter `domain`
//	    - name: per-user         # unique in the domain
//	      match:
//	        - key: user_id       # no value: any value, one bucket per value
//	        - key: path
//	          value: /api/*      # exact, or a prefix with a trailing "*"
//	      capacity: 100
//	      refill: 10/s           # bucket.ParseRate: 600/m, 600/minute, 1/1500ms, 7/3s
//	      cost: 1                # default 1
//	      max_cost: 100          # default capacity
//	      on_resize: clamp       # clamp | scale
//	      on_store_error: local  # local | deny | allow [Compiler.OnStoreError, else local]
//	      shadow: false
//	    - name: health
//	      match: [{key: path, value: /healthz}]
//	      unlimited: true
//	    - name: api
//	      match:
//	        - key: path
//	          value: /api/*/v1   # a "*" inside: a glob
//	          shared: true       # one bucket for every value it accepts
//	          metric: true       # counted by value (tokengate_descriptor_decisions_total)
//	        - {key: tag, value: "a*", literal: true}  # "*" as a plain character
//	      capacity: 0            # denies everything, no bucket
//	      current_limit: {requests_per_unit: 0, unit: minute, name: banned}
//	      replaces: [per-user]   # limit names dropped from the same request
//	      quota: true            # refuses a request only with all its quota rules
//	    - name: stop
//	      match: [{key: path}]
//	      not_limited: true      # matches, and answers as if no rule did
//
//	front_doors:                 # optional: see package spec (pkg/frontdoor/spec)
//
// # Files, directories and the envoyproxy/ratelimit format
//
// A policy is one file or a set of them (ReadFiles, ParseFiles,
// Compiler.CompileFiles: a directory's *.yaml files). A file whose
// top-level key is domain (or descriptors) is in envoyproxy/ratelimit's
// format, one domain a file (the compat format, in the files' names:
// compat*.go); compatparse.go reads it and compatflat.go turns its tree of
// descriptors into the rules above, in an order under which first
// match decides as the reference's walk does; their limits charge every
// hit (charge: every_hit, max_debt one window's requests_per_unit), or
// before the request with Compiler.ReferencePrepaid. A domain defined in two
// files is an error naming both. NativeYAML writes any policy back in this
// format (`tokengate import`), ImportReport lists how the answers differ
// from the reference's.
//
// The front_doors section, how requests that arrive without descriptors
// (ext_authz, forward-auth) become descriptors, is compiled by package
// spec while the file is read; Policy.FrontDoor returns the result.
//
// A descriptor matches a rule when it has exactly the rule's entries, in
// order, with equal keys and accepted values; the first matching rule of
// the domain, in file order, wins. Parse reports every problem of a bad
// file at once (Errors, each Issue naming file, line, domain, rule and
// field); rules that can never match (unreachable rules), and domains: {}
// or a domain without rules, are warnings (Policy.Warnings). Unreachable
// rules are found through the match index (unreachable.go), so a 4 MB file
// validates in well under a second.
//
// # Versions and reloads
//
// Each limited rule carries a *bucket.Version per band (Rule.Bands: its
// limits, limits.go; a calendar budget, budget.go, is a band whose buckets
// never refill, one per period, its version's Horizon the period's end).
// A Compiler compiles a new file against the policy now serving: unchanged
// bands keep their version pointer, changed ones get the next version of
// their lineage, and
// Policy.Activate publishes them (and removes the lineages of rules that
// left) when the new policy starts serving. Stores bring each bucket to its
// rule's version lazily (bucket.Version.Bring; docs/ARCHITECTURE.md,
// section 4).
//
// # Concurrency
//
// A Policy and its Rules are immutable and safe for concurrent use; Match
// and Rule.AppendKey do not allocate. A Compiler is safe for concurrent use.
package policy
