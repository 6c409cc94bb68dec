package main

// "compat" in this file's names means envoyproxy/ratelimit's contract (the
// "reference" of the comments), here its process contract.
//
// Invoked by the name ratelimit (the image's /bin/ratelimit, a link to
// tokengate) and with no arguments, tokengate takes envoyproxy/ratelimit's
// process contract: it is configured only by that service's environment
// variables, with that service's defaults, and serves its ports and
// endpoints. compatSettings turns the variables into the settings serve uses
// (the same struct, the same checks, the same server): there is no second
// start-up path, only a second way to fill settings.
//
// Every variable the reference reads is in compatVars, with what becomes of
// it: mapped onto tokengate's settings (compatAssign), inert (accepted: it
// asks for nothing tokengate does differently, or for tuning tokengate
// does its own way; logged at start when set), or unsupported (a value
// other than the reference's default stops the start, naming the
// variable). docs/reference-format.md's table of them is written from
// compatVars.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tokengate/tokengate/pkg/policy"
)

// compatKind is what becomes of a reference variable.
type compatKind uint8

const (
	compatMapped      compatKind = iota // onto a setting, by compatAssign
	compatInert                         // accepted; no effect (doc says why)
	compatUnsupported                   // refused unless unset or at its default
)

// compatVar is one environment variable of envoyproxy/ratelimit (its
// src/settings/settings.go).
type compatVar struct {
	name string
	def  string // the reference's default
	kind compatKind
	doc  string // the settings it lands in, or why it has no effect or is refused
}

// assignment is one setting compatAssign gives: the flag name and its value,
// parsed by the flag's own parser, and the variables it comes from.
type assignment struct {
	flag, value, from string
}

// compatEnv is the environment as the reference reads it: a variable that is
// empty is unset, and an unset one has its default.
type compatEnv struct {
	vars map[string]string // the set ones, by name
	read map[string]bool   // the ones asked for (a test checks every mapped one is)
	errs []error
}

func newCompatEnv(environ []string) *compatEnv {
	e := &compatEnv{vars: map[string]string{}, read: map[string]bool{}}
	for _, kv := range environ {
		if k, v, _ := strings.Cut(kv, "="); v != "" {
			e.vars[k] = v
		}
	}
	return e
}

func (e *compatEnv) isSet(name string) bool {
	e.read[name] = true
	_, ok := e.vars[name]
	return ok
}

// get is name's value, else its default.
func (e *compatEnv) get(name string) string {
	e.read[name] = true
	if v, ok := e.vars[name]; ok {
		return v
	}
	return compatVarNamed(name).def
}

// bool is name's value as the reference parses it (strconv.ParseBool); a
// value that does not parse is an error naming it.
func (e *compatEnv) bool(name string) bool {
	v := e.get(name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

// port is name's value, a TCP port.
func (e *compatEnv) port(name string) string {
	v := e.get(name)
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a port number", name, v))
	}
	return v
}

func (e *compatEnv) fail(format string, args ...any) {
	e.errs = append(e.errs, fmt.Errorf(format, args...))
}

func compatVarNamed(name string) compatVar {
	for _, v := range compatVars {
		if v.name == name {
			return v
		}
	}
	panic("compatenv: no variable " + name)
}

// compatAssign maps the reference's variables of e onto tokengate's settings.
// Its errors name the variable and value.
func compatAssign(e *compatEnv) []assignment {
	var as []assignment
	set := func(flag, value, from string) { as = append(as, assignment{flag, value, from}) }

	set("http-addr", net.JoinHostPort(e.get("HOST"), e.port("PORT")), "HOST, PORT")
	set("grpc-addr", net.JoinHostPort(e.get("GRPC_HOST"), e.port("GRPC_PORT")), "GRPC_HOST, GRPC_PORT")
	// pprof and /rlconfig are for the pod's own debugging: on loopback
	// unless DEBUG_HOST asks otherwise, where the reference binds 0.0.0.0.
	debugHost := "127.0.0.1"
	if e.isSet("DEBUG_HOST") {
		debugHost = e.get("DEBUG_HOST")
	}
	set("debug-addr", net.JoinHostPort(debugHost, e.port("DEBUG_PORT")), "DEBUG_HOST, DEBUG_PORT")
	set("log-level", compatLogLevel(e), "LOG_LEVEL")
	set("log-format", map[bool]string{true: "json", false: "text"}[strings.EqualFold(e.get("LOG_FORMAT"), "json")], "LOG_FORMAT")

	switch ct := e.get("CONFIG_TYPE"); ct {
	case "FILE":
		if e.bool("RUNTIME_WATCH_ROOT") && e.get("RUNTIME_SUBDIRECTORY") == "" {
			e.fail("RUNTIME_SUBDIRECTORY is not set: with RUNTIME_WATCH_ROOT true the reference then loads no configuration at all; set it (the policy is $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY)")
		}
		e.bool("RUNTIME_IGNOREDOTFILES") // tokengate never reads dot files; the value must parse all the same
		set("policy", filepath.Join(e.get("RUNTIME_ROOT"), e.get("RUNTIME_SUBDIRECTORY"), e.get("RUNTIME_APPDIRECTORY")),
			"RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY")
	case "GRPC_XDS_SOTW":
		as = append(as, compatXDS(e)...)
	default:
		e.fail("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", ct)
	}

	if bt := e.get("BACKEND_TYPE"); bt != "redis" {
		e.fail("BACKEND_TYPE=%q: tokengate's stores are memory and redis; a memcache backend is not supported", bt)
	}
	set("store", "redis", "BACKEND_TYPE")
	as = append(as, compatRedis(e)...)

	if e.bool("USE_PROMETHEUS") {
		set("metrics-addr", e.get("PROMETHEUS_ADDR"), "USE_PROMETHEUS, PROMETHEUS_ADDR")
		set("metrics-path", e.get("PROMETHEUS_PATH"), "PROMETHEUS_PATH")
	}
	if e.bool("USE_STATSD") && e.isSet("USE_STATSD") {
		e.fail("USE_STATSD=%s: tokengate sends no statsd; its metrics are Prometheus's (USE_PROMETHEUS=true, PROMETHEUS_ADDR), and always /metrics on PORT; set USE_STATSD=false", e.get("USE_STATSD"))
	}
	if e.bool("SHADOW_MODE") {
		set("shadow-all", "true", "SHADOW_MODE")
	}
	if e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		set("reference-charge", policy.StopWhenOver.String(), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	}
	if e.bool("LIMIT_RESPONSE_HEADERS_ENABLED") {
		set("limit-headers", strings.Join([]string{e.get("LIMIT_LIMIT_HEADER"), e.get("LIMIT_REMAINING_HEADER"), e.get("LIMIT_RESET_HEADER")}, ","),
			"LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER")
	}
	if e.bool("GRPC_SERVER_USE_TLS") {
		set("grpc-tls-cert-file", e.get("GRPC_SERVER_TLS_CERT"), "GRPC_SERVER_TLS_CERT")
		set("grpc-tls-key-file", e.get("GRPC_SERVER_TLS_KEY"), "GRPC_SERVER_TLS_KEY")
		if ca := e.get("GRPC_CLIENT_TLS_CACERT"); ca != "" {
			set("grpc-tls-client-ca-file", ca, "GRPC_CLIENT_TLS_CACERT")
			set("grpc-tls-require-client-cert", "true", "GRPC_CLIENT_TLS_CACERT")
		}
	}
	if e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG") {
		set("xds-force-start", "true", "FORCE_START_WITHOUT_INITIAL_CONFIG")
	}
	return as
}

// compatLogLevel maps logrus's levels onto slog's.
func compatLogLevel(e *compatEnv) string {
	switch v := strings.ToLower(e.get("LOG_LEVEL")); v {
	case "trace", "debug":
		return "debug"
	case "info":
		return "info"
	case "warn", "warning":
		return "warn"
	case "error", "fatal", "panic":
		return "error"
	}
	e.fail("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", e.get("LOG_LEVEL"))
	return "info"
}

// compatXDS maps CONFIG_TYPE=GRPC_XDS_SOTW's variables onto --xds-*.
func compatXDS(e *compatEnv) []assignment {
	as := []assignment{
		{"xds-server", e.get("CONFIG_GRPC_XDS_SERVER_URL"), "CONFIG_TYPE, CONFIG_GRPC_XDS_SERVER_URL"},
		{"xds-node-id", e.get("CONFIG_GRPC_XDS_NODE_ID"), "CONFIG_GRPC_XDS_NODE_ID"},
	}
	if md := e.get("CONFIG_GRPC_XDS_NODE_METADATA"); md != "" {
		// As the reference reads it: key=value pairs, comma-separated; a
		// pair without "=" is skipped.
		m := map[string]string{}
		for _, kv := range strings.Split(md, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		as = append(as, assignment{"xds-node-metadata", string(b), "CONFIG_GRPC_XDS_NODE_METADATA"})
	}
	if e.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		// --xds-ca-file, --xds-cert-file or --xds-server-name turns TLS on;
		// without a CA file the system's roots verify, as the reference's.
		ca, cert, san := e.get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), e.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), e.get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
		if ca == "" && cert == "" && san == "" {
			e.fail("CONFIG_GRPC_XDS_SERVER_USE_TLS=true alone: tokengate turns TLS to the xDS server on with CONFIG_GRPC_XDS_SERVER_TLS_CACERT, CONFIG_GRPC_XDS_CLIENT_TLS_CERT or CONFIG_GRPC_XDS_SERVER_TLS_SAN; set one")
		}
		if ca != "" {
			as = append(as, assignment{"xds-ca-file", ca, "CONFIG_GRPC_XDS_SERVER_USE_TLS, CONFIG_GRPC_XDS_SERVER_TLS_CACERT"})
		}
		if cert != "" {
			as = append(as, assignment{"xds-cert-file", cert, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"},
				assignment{"xds-key-file", e.get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"})
		}
		if san != "" {
			as = append(as, assignment{"xds-server-name", san, "CONFIG_GRPC_XDS_SERVER_TLS_SAN"})
		}
	}
	return as
}

// compatRedis maps the REDIS_* variables onto --redis-*. REDIS_URL is a
// socket path (REDIS_SOCKET_TYPE unix), host:port or a redis:// URL
// (SINGLE), MASTER,SENTINEL,... (SENTINEL) or seed nodes, comma-separated
// (CLUSTER). REDIS_AUTH is PASSWORD or USER:PASSWORD.
func compatRedis(e *compatEnv) []assignment {
	var as []assignment
	set := func(flag, value, from string) { as = append(as, assignment{flag, value, from}) }
	url, typ := e.get("REDIS_URL"), strings.ToLower(e.get("REDIS_TYPE"))
	switch socket := e.get("REDIS_SOCKET_TYPE"); {
	case socket != "unix" && socket != "tcp":
		e.fail("REDIS_SOCKET_TYPE=%q: want unix or tcp", socket)
	case socket == "unix" && typ != "single":
		e.fail("REDIS_SOCKET_TYPE=unix with REDIS_TYPE=%s: tokengate reaches Sentinel and Cluster nodes over TCP only", e.get("REDIS_TYPE"))
	case socket == "unix" && (strings.Contains(url, "://") || strings.Contains(url, ":") && !strings.Contains(url, "/")):
		// unix://host:port would fail only at the dial, as "missing address".
		e.fail("REDIS_SOCKET_TYPE=unix (its default) with REDIS_URL=%q, which is no socket path: set REDIS_SOCKET_TYPE=tcp for a host:port or redis:// URL, or REDIS_URL to the socket's path", url)
	case socket == "unix":
		set("redis-url", "unix://"+url, "REDIS_SOCKET_TYPE, REDIS_URL")
	case typ == "single" && strings.HasPrefix(url, "/"):
		e.fail("REDIS_SOCKET_TYPE=tcp with REDIS_URL=%q, a socket path: set REDIS_SOCKET_TYPE=unix for a socket, or REDIS_URL to host:port", url)
	case typ == "single" && strings.Contains(url, "://"):
		set("redis-url", url, "REDIS_URL")
	case typ == "single":
		set("redis-addr", url, "REDIS_URL")
	case typ == "sentinel":
		master, sentinels, ok := strings.Cut(url, ",")
		if !ok || master == "" || sentinels == "" {
			e.fail("REDIS_URL=%q with REDIS_TYPE=SENTINEL: want MASTER,SENTINEL1,...,SENTINELN", url)
		}
		set("redis-sentinel-master", master, "REDIS_TYPE, REDIS_URL")
		set("redis-addr", sentinels, "REDIS_URL")
	case typ == "cluster":
		set("redis-cluster", "true", "REDIS_TYPE")
		set("redis-addr", url, "REDIS_URL")
	default:
		e.fail("REDIS_TYPE=%q: want SINGLE, SENTINEL or CLUSTER", e.get("REDIS_TYPE"))
	}
	if auth := e.get("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			set("redis-username", user, "REDIS_AUTH")
			auth = pass
		}
		set("redis-password", auth, "REDIS_AUTH")
	}
	if e.bool("REDIS_TLS") {
		set("redis-tls", "true", "REDIS_TLS")
		if ca := e.get("REDIS_TLS_CACERT"); ca != "" {
			set("redis-ca-file", ca, "REDIS_TLS_CACERT")
		}
		if c := e.get("REDIS_TLS_CLIENT_CERT"); c != "" {
			set("redis-cert-file", c, "REDIS_TLS_CLIENT_CERT")
			set("redis-key-file", e.get("REDIS_TLS_CLIENT_KEY"), "REDIS_TLS_CLIENT_KEY")
		}
	}
	// Tuning read only when given: the reference's defaults are for its own
	// client (a pool of connections that carry one command each), not for
	// tokengate's pipelined one.
	for _, m := range []struct{ v, flag string }{
		{"REDIS_POOL_SIZE", "redis-pool-size"},
		{"REDIS_TIMEOUT", "redis-dial-timeout"},
		{"CACHE_KEY_PREFIX", "redis-key-prefix"},
		{"LOCAL_CACHE_SIZE_IN_BYTES", "redis-deny-cache-bytes"},
	} {
		if e.isSet(m.v) {
			set(m.flag, e.get(m.v), m.v)
		}
	}
	if e.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
		set("ready-requires-store", "true", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	}
	return as
}

// compatNote is what start-up logs about a variable: an inert one that is
// set.
type compatNote struct{ name, value, doc string }

// compatSettings fills settings from environ as envoyproxy/ratelimit reads
// it, and checks them as serve does. It returns the notes to log (inert
// variables that are set), or every problem at once: an unsupported
// variable set to other than its default, a TOKENGATE_* variable (here
// only the reference's are read), a value that does not parse.
func compatSettings(environ []string) (settings, []compatNote, error) {
	e := newCompatEnv(environ)
	var notes []compatNote
	for _, name := range slices.Sorted(maps.Keys(e.vars)) {
		if strings.HasPrefix(name, "TOKENGATE_") {
			e.fail("%s is set: invoked as ratelimit, tokengate reads only envoyproxy/ratelimit's variables (run it as tokengate to use its own)", name)
		}
	}
	for _, rv := range compatVars {
		v, ok := e.vars[rv.name]
		switch {
		case !ok:
		case rv.kind == compatUnsupported && v != rv.def:
			e.fail("%s=%q: not supported by tokengate: %s", rv.name, v, rv.doc)
		case rv.kind == compatInert:
			notes = append(notes, compatNote{rv.name, v, rv.doc})
		}
	}
	var s settings
	b := bindSettings(&s)
	for _, a := range compatAssign(e) {
		_, f, ok := b.lookup(a.flag)
		if !ok {
			e.fail("%s: this build of tokengate has no --%s", a.from, a.flag)
			continue
		}
		if err := f.Value.Set(a.value); err != nil {
			e.fail("%s: %q for --%s: want %s", a.from, a.value, a.flag, wants(f))
		}
	}
	if err := errors.Join(e.errs...); err != nil {
		return settings{}, nil, fmt.Errorf("invoked as ratelimit (envoyproxy/ratelimit's environment):\n%w", err)
	}
	if err := s.check(); err != nil {
		return settings{}, nil, fmt.Errorf("invoked as ratelimit: %w", err)
	}
	return s, notes, nil
}

// runAsReference is main when invoked as ratelimit.
func runAsReference(args, environ []string, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "ratelimit: takes no arguments (it reads envoyproxy/ratelimit's environment variables), got %q; run tokengate help for tokengate's commands\n", args)
		return 1
	}
	s, notes, err := compatSettings(environ)
	if err == nil {
		err = serveSettings(s, stderr, notes)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit (tokengate):", err)
		return 1
	}
	return 0
}
