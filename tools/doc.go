// Package tools holds tests whose dependencies are too heavy for the main
// module: the Helm chart in charts/tokengate is rendered and linted with
// the Helm SDK, and every object it renders, like every Kubernetes manifest
// under examples/, is decoded strictly into the Kubernetes API types; the
// alert rules and the dashboard (charts/tokengate/files) are parsed with
// Prometheus's PromQL parser and checked against a running tokengate's
// /metrics (tools/monitoring). It is
// a module of its own (tools/go.mod) so that tokengate's go.mod stays lean;
// run its tests with `cd tools && go test ./...` (make test does).
package tools
