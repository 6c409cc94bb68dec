package wiretest

// UserPolicy, for the tests that send user ids that are not UTF-8: it
// gives each user UserCapacity requests, by descriptor (domain edge, key
// user_id) or, through ext_authz, by the x-user-id header; nothing refills
// within a test.
const UserPolicy = `revision: 1
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 2
      refill: 1/h
front_doors:
  ext_authz:
    domains:
      edge:
        - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user_id}}]
`

// UserCapacity is UserPolicy's capacity.
const UserCapacity = 2
