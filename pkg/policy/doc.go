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
//	      refill: 10/s           # bucket.ParseRate: 600/m, 1/1500ms, 7/3s
//	      cost: 1                # default 1
//	      max_cost: 100          # default capacity
//	      on_resize: clamp       # clamp | scale
//	      on_store_error: deny   # deny | allow | local
//	      shadow: false
//	    - name: health
//	      match: [{key: path, value: /healthz}]
//	      unlimited: true
//
//	front_doors:                 # optional: requests that arrive without descriptors
//	  ext_authz:                 # Envoy's ext_authz filter (gRPC Check)
//	    trusted_proxy_hops: 0    # 0: the client is the direct peer (see ClientAddress)
//	    domains:
//	      edge:                  # each descriptor: its actions, in order
//	        - actions: [{remote_address: {}}]
//	        - actions:
//	            - request_headers: {header_name: x-user-id, descriptor_key: user_id}
//	            - path: {strip_query: true}       # descriptor_key defaults to the action name
//	          hits_addend: {request_header: x-cost}
//	  forward_auth:              # HTTP /v1/check (Traefik, Caddy, ingress-nginx)
//	    trusted_proxy_hops: 1    # the ingress appends the client to X-Forwarded-For
//	    original_request: x-forwarded   # or x-original (ingress-nginx)
//	    domains: {edge: [{actions: [{method: {}}, {host: {}}]}]}
//
// Front-door actions are remote_address, request_headers (header_name,
// descriptor_key, skip_if_absent), path (strip_query), method, host, scheme
// and generic_key (descriptor_value); a descriptor one of whose actions
// finds nothing is not sent, as in Envoy.
//
// A descriptor matches a rule when it has exactly the rule's entries, in
// order, with equal keys and accepted values; the first matching rule of
// the domain, in file order, wins. Parse reports every problem of a bad
// file at once (Errors, each Issue naming file, line, domain, rule and
// field); rules that can never match are warnings (Policy.Warnings).
//
// # Versions and reloads
//
// Each limited rule carries a *bucket.Version. A Compiler compiles a new
// file against the policy now serving: unchanged rules keep their version
// pointer, changed ones get the next version of their lineage, and
// Policy.Activate publishes them (and removes the lineages of rules that
// left) when the new policy starts serving. Stores bring each bucket to its
// rule's version lazily (DESIGN.md §4).
//
// # Concurrency
//
// A Policy and its Rules are immutable and safe for concurrent use; Match
// and Rule.AppendKey do not allocate. A Compiler is safe for concurrent use.
package policy
