// Package spec is the front_doors section of the policy file: per front
// door and domain, how a request that arrives without descriptors
// (Envoy's ext_authz filter, the HTTP forward-auth of Traefik, Caddy,
// ingress-nginx and others) becomes rate-limit descriptors. Package policy
// hands it the section while it reads the file and keeps what it compiles
// (policy.Policy.FrontDoor); package policy then matches the descriptors to
// rules, as it does Envoy's own.
//
//	front_doors:
//	  ext_authz:                 # Envoy's ext_authz filter (gRPC Check)
//	    trusted_proxy_hops: 0    # 0: the client is the direct peer (see Door.ClientAddress)
//	    default_domain: edge     # optional: for requests that name no domain
//	    normalize_path: true     # default: descriptors read the path normalised (NormalizePath)
//	    domains:
//	      edge:                  # each descriptor: its actions, in order
//	        - actions: [{remote_address: {}}]
//	        - actions:
//	            - request_headers: {header_name: x-user-id, descriptor_key: user_id}
//	            - path: {strip_query: true, strip_trailing_slash: true, lowercase: true}
//	          hits_addend: {request_header: x-cost}
//	  forward_auth:              # HTTP /v1/check (Traefik, Caddy, ingress-nginx)
//	    trusted_proxy_hops: 1    # the ingress appends the client to X-Forwarded-For
//	    original_request: x-forwarded   # or x-original (ingress-nginx)
//	    domains: {edge: [{actions: [{method: {}}, {host: {}}]}]}
//
// The actions are modelled on Envoy's route rate_limits actions:
// remote_address, request_headers (header_name, descriptor_key,
// skip_if_absent), path (strip_query, strip_trailing_slash, lowercase),
// method, host (lowercase), scheme and generic_key (descriptor_value), and
// a header as the descriptor's hits_addend; descriptor_key defaults to the
// action's name. A descriptor one of whose actions finds nothing (a
// missing header) is not sent, as in Envoy.
//
// Every value of a descriptor is part of its bucket key, so a door reads
// the request's path normalised (Door.Target, NormalizePath): the ways of
// spelling one path a backend serves as one resource are one value.
//
// Package policy imports this one, so this one knows the rest of the file
// only through the Reader and Rules it is given.
//
// Everything Parse returns is immutable and safe for concurrent use.
package spec
