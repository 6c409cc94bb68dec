// Package config holds the policy tokengate uses when it is given none
// (default.yaml, embedded in the binary) and, under examples/, example
// policies that the tests keep valid.
package config

import _ "embed"

// Default is the built-in policy file: domain "edge" with per-client,
// per-user, login, search and API limits and an unlimited /healthz. Do not
// modify it.
//
//go:embed default.yaml
var Default []byte

// DefaultName names Default in policy messages and metrics.
const DefaultName = "builtin:default.yaml"
