package main

// The compat environment: envoyproxy/ratelimit's variables read as it
// reads them (compatenv.go).

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// mapCompat maps env as compatAssign does: flag -> value, and the
// environment read.
func mapCompat(env ...string) (map[string]string, *compatEnv) {
	e := newCompatEnv(env)
	out := map[string]string{}
	for _, a := range compatAssign(e) {
		out[a.flag] = a.value
	}
	return out, e
}

// compatFlags is mapCompat's flags and errors.
func compatFlags(env ...string) (map[string]string, string) {
	out, e := mapCompat(env...)
	var errs []string
	for _, err := range e.errs {
		errs = append(errs, err.Error())
	}
	return out, strings.Join(errs, "\n")
}

const subdir = "RUNTIME_SUBDIRECTORY=ratelimit"

// Each variable's effect: the settings it lands in.
func TestCompatEnvMapping(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string // flags that must have these values
		not  []string          // flags that must not be given
	}{
		{"defaults", []string{subdir}, map[string]string{
			"http-addr": "0.0.0.0:8080", "grpc-addr": "0.0.0.0:8081", "debug-addr": "127.0.0.1:6070",
			"log-level": "warn", "log-format": "text", "store": "redis",
			"policy":    "/srv/runtime_data/current/ratelimit/config",
			"redis-url": "unix:///var/run/nutcracker/ratelimit.sock",
		}, []string{"metrics-addr", "shadow-all", "limit-headers", "redis-tls", "redis-pool-size", "redis-password", "xds-server", "grpc-tls-cert-file", "ready-requires-store"}},
		{"ports", []string{subdir, "HOST=127.0.0.1", "PORT=18080", "GRPC_HOST=::1", "GRPC_PORT=18081", "DEBUG_HOST=localhost", "DEBUG_PORT=16070"},
			map[string]string{"http-addr": "127.0.0.1:18080", "grpc-addr": "[::1]:18081", "debug-addr": "localhost:16070"}, nil},
		{"debug on every address, asked for", []string{subdir, "DEBUG_HOST=0.0.0.0"}, map[string]string{"debug-addr": "0.0.0.0:6070"}, nil},
		{"runtime", []string{"RUNTIME_ROOT=/data", subdir, "RUNTIME_APPDIRECTORY=rl", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true"},
			map[string]string{"policy": "/data/ratelimit/rl"}, nil},
		{"runtime without subdirectory, not watching the root", []string{"RUNTIME_ROOT=/data", "RUNTIME_WATCH_ROOT=false"},
			map[string]string{"policy": "/data/config"}, nil},
		{"log", []string{subdir, "LOG_LEVEL=debug", "LOG_FORMAT=json"}, map[string]string{"log-level": "debug", "log-format": "json"}, nil},
		{"log trace", []string{subdir, "LOG_LEVEL=TRACE", "LOG_FORMAT=logfmt"}, map[string]string{"log-level": "debug", "log-format": "text"}, nil},
		{"log fatal", []string{subdir, "LOG_LEVEL=Fatal"}, map[string]string{"log-level": "error"}, nil},
		{"tcp single", []string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis:6379"}, map[string]string{"redis-addr": "redis:6379"}, []string{"redis-url", "redis-cluster"}},
		{"tcp single URL", []string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis://redis:6379/2"}, map[string]string{"redis-url": "redis://redis:6379/2"}, []string{"redis-addr"}},
		{"sentinel", []string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=mymaster,s1:26379,s2:26379"},
			map[string]string{"redis-sentinel-master": "mymaster", "redis-addr": "s1:26379,s2:26379"}, nil},
		{"cluster", []string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=CLUSTER", "REDIS_URL=n1:6379,n2:6379"},
			map[string]string{"redis-cluster": "true", "redis-addr": "n1:6379,n2:6379"}, nil},
		{"auth", []string{subdir, "REDIS_AUTH=s3cret"}, map[string]string{"redis-password": "s3cret"}, []string{"redis-username"}},
		{"auth with user", []string{subdir, "REDIS_AUTH=rl:s3:cret"}, map[string]string{"redis-username": "rl", "redis-password": "s3:cret"}, nil},
		{"tls", []string{subdir, "REDIS_TLS=true", "REDIS_TLS_CACERT=/ca.pem", "REDIS_TLS_CLIENT_CERT=/c.pem", "REDIS_TLS_CLIENT_KEY=/k.pem"},
			map[string]string{"redis-tls": "true", "redis-ca-file": "/ca.pem", "redis-cert-file": "/c.pem", "redis-key-file": "/k.pem"}, nil},
		{"tls files without tls", []string{subdir, "REDIS_TLS_CACERT=/ca.pem"}, nil, []string{"redis-tls", "redis-ca-file"}},
		{"redis tuning", []string{subdir, "REDIS_POOL_SIZE=16", "REDIS_TIMEOUT=2s", "CACHE_KEY_PREFIX=rl:", "LOCAL_CACHE_SIZE_IN_BYTES=0", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"},
			map[string]string{"redis-pool-size": "16", "redis-dial-timeout": "2s", "redis-key-prefix": "rl:", "redis-deny-cache-bytes": "0", "ready-requires-store": "true"}, nil},
		{"prometheus", []string{subdir, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_PATH=/stats"},
			map[string]string{"metrics-addr": ":19001", "metrics-path": "/stats"}, nil},
		{"prometheus defaults", []string{subdir, "USE_PROMETHEUS=true"}, map[string]string{"metrics-addr": ":9090", "metrics-path": "/metrics"}, nil},
		{"prometheus address without USE_PROMETHEUS", []string{subdir, "PROMETHEUS_ADDR=:19001"}, nil, []string{"metrics-addr"}},
		{"statsd off", []string{subdir, "USE_STATSD=false"}, nil, nil},
		{"shadow", []string{subdir, "SHADOW_MODE=true"}, map[string]string{"shadow-all": "true"}, nil},
		{"stop counting refused hits", []string{subdir, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, map[string]string{"reference-charge": "stop_when_over"}, nil},
		{"count every hit", []string{subdir, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, nil, []string{"reference-charge"}},
		{"headers", []string{subdir, "LIMIT_RESPONSE_HEADERS_ENABLED=true"}, map[string]string{"limit-headers": "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"}, nil},
		{"headers named", []string{subdir, "LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-RateLimit-Limit", "LIMIT_REMAINING_HEADER=X-RateLimit-Remaining", "LIMIT_RESET_HEADER=X-RateLimit-Reset"},
			map[string]string{"limit-headers": "X-RateLimit-Limit,X-RateLimit-Remaining,X-RateLimit-Reset"}, nil},
		{"grpc tls", []string{subdir, "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key"},
			map[string]string{"grpc-tls-cert-file": "/certs/tls.crt", "grpc-tls-key-file": "/certs/tls.key"}, []string{"grpc-tls-client-ca-file", "grpc-tls-require-client-cert"}},
		{"grpc mtls", []string{subdir, "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/c", "GRPC_SERVER_TLS_KEY=/k", "GRPC_CLIENT_TLS_CACERT=/ca"},
			map[string]string{"grpc-tls-client-ca-file": "/ca", "grpc-tls-require-client-cert": "true"}, nil},
		{"grpc tls files without tls", []string{subdir, "GRPC_SERVER_TLS_CERT=/c", "GRPC_SERVER_TLS_KEY=/k"}, nil, []string{"grpc-tls-cert-file"}},
		// Envoy Gateway's environment (internal/infrastructure/kubernetes/ratelimit).
		{"envoy gateway", []string{"RUNTIME_ROOT=/data", subdir, "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false", "LOG_LEVEL=info", "USE_STATSD=false",
			"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
			"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt",
			"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis.svc:6379",
			"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml"},
			map[string]string{
				"xds-server": "envoy-gateway:18001", "xds-node-id": "envoy-ratelimit",
				"xds-ca-file": "/certs/ca.crt", "xds-cert-file": "/certs/tls.crt", "xds-key-file": "/certs/tls.key",
				"grpc-tls-cert-file": "/certs/tls.crt", "grpc-tls-key-file": "/certs/tls.key",
				"redis-addr": "redis.redis.svc:6379", "metrics-addr": ":19001", "log-level": "info", "xds-force-start": "true",
			},
			// GRPC_SERVER_TLS_CA_CERT is not a variable of the reference: it
			// requires no client certificate there, nor here.
			[]string{"policy", "grpc-tls-client-ca-file", "grpc-tls-require-client-cert"}},
		{"xds metadata and name", []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA=zone=a,bad,team=rl=x",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/ca", "CONFIG_GRPC_XDS_SERVER_TLS_SAN=cp.example"},
			map[string]string{"xds-server": "localhost:18000", "xds-node-id": "default", "xds-node-metadata": `{"team":"rl=x","zone":"a"}`, "xds-server-name": "cp.example"}, []string{"policy", "xds-cert-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := compatFlags(tc.env...)
			if errs != "" {
				t.Fatalf("errors: %s", errs)
			}
			for flag, v := range tc.want {
				if got[flag] != v {
					t.Errorf("--%s = %q, want %q", flag, got[flag], v)
				}
			}
			for _, flag := range tc.not {
				if v, ok := got[flag]; ok {
					t.Errorf("--%s = %q, want it not given", flag, v)
				}
			}
		})
	}
}

// Values that do not parse, or that ask for what tokengate does not do,
// stop the start with a message naming the variable.
func TestCompatEnvRefused(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "RUNTIME_SUBDIRECTORY is not set"},
		{[]string{subdir, "PORT=http"}, `PORT="http": want a port number`},
		{[]string{subdir, "SHADOW_MODE=yes"}, `SHADOW_MODE="yes": want true or false`},
		{[]string{subdir, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=on"}, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="on": want true or false`},
		{[]string{subdir, "LOG_LEVEL=loud"}, `LOG_LEVEL="loud"`},
		{[]string{subdir, "CONFIG_TYPE=GRPC_XDS_DELTA"}, `CONFIG_TYPE="GRPC_XDS_DELTA": want FILE or GRPC_XDS_SOTW`},
		{[]string{subdir, "BACKEND_TYPE=memcache"}, `BACKEND_TYPE="memcache"`},
		{[]string{subdir, "USE_STATSD=true"}, "USE_STATSD=true: tokengate sends no statsd"},
		{[]string{subdir, "USE_STATSD=1"}, "USE_STATSD=1: tokengate sends no statsd"},
		{[]string{subdir, "REDIS_SOCKET_TYPE=udp"}, `REDIS_SOCKET_TYPE="udp"`},
		{[]string{subdir, "REDIS_TYPE=cluster"}, "REDIS_SOCKET_TYPE=unix with REDIS_TYPE=cluster"},
		{[]string{subdir, "REDIS_URL=redis:6379"}, `REDIS_SOCKET_TYPE=unix (its default) with REDIS_URL="redis:6379", which is no socket path: set REDIS_SOCKET_TYPE=tcp for a host:port or redis:// URL, or REDIS_URL to the socket's path`},
		{[]string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=/var/run/redis.sock"}, `REDIS_SOCKET_TYPE=tcp with REDIS_URL="/var/run/redis.sock", a socket path: set REDIS_SOCKET_TYPE=unix for a socket, or REDIS_URL to host:port`},
		{[]string{subdir, "REDIS_URL=redis://redis:6379/0"}, `REDIS_URL="redis://redis:6379/0", which is no socket path`},
		{[]string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=s1:26379"}, "want MASTER,SENTINEL1"},
		{[]string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=replica"}, `REDIS_TYPE="replica"`},
		{[]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true"}, "CONFIG_GRPC_XDS_SERVER_USE_TLS=true alone"},
	} {
		if _, errs := compatFlags(tc.env...); !strings.Contains(errs, tc.want) {
			t.Errorf("%q: errors %q, want %q", tc.env, errs, tc.want)
		}
	}
}

// Every unsupported variable, set to other than its default, stops the
// start naming it; at its default it is accepted. So does a TOKENGATE_*
// variable.
func TestCompatEnvUnsupported(t *testing.T) {
	for _, rv := range compatVars {
		if rv.kind != compatUnsupported {
			continue
		}
		value := "x" + rv.def
		if rv.def == "false" {
			value = "true"
		}
		_, _, err := compatSettings([]string{subdir, rv.name + "=" + value})
		if err == nil || !strings.Contains(err.Error(), rv.name+"=") || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("%s=%s: %v", rv.name, value, err)
		}
		if rv.def != "" {
			if _, _, err := compatSettings([]string{subdir, rv.name + "=" + rv.def}); err != nil {
				t.Errorf("%s at its default %q: %v", rv.name, rv.def, err)
			}
		}
	}
	if _, _, err := compatSettings([]string{subdir, "TOKENGATE_STORE=memory"}); err == nil || !strings.Contains(err.Error(), "TOKENGATE_STORE is set") {
		t.Errorf("TOKENGATE_STORE: %v", err)
	}
}

// Inert variables are accepted and returned to be logged.
func TestCompatEnvInert(t *testing.T) {
	_, notes, err := compatSettings([]string{subdir, "PROMETHEUS_MAPPER_YAML=/etc/m.yaml", "NEAR_LIMIT_RATIO=0.9"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range notes {
		got[n.name] = n.value
	}
	if want := map[string]string{"PROMETHEUS_MAPPER_YAML": "/etc/m.yaml", "NEAR_LIMIT_RATIO": "0.9"}; !maps.Equal(got, want) {
		t.Fatalf("notes %v, want %v", got, want)
	}
}

// compatSettings lands the values in the settings serve uses, parsed and
// checked as serve's own.
func TestCompatEnvSettings(t *testing.T) {
	s, _, err := compatSettings([]string{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=10.0.0.1:6380", "REDIS_AUTH=u:p", "REDIS_POOL_SIZE=8",
		"REDIS_TIMEOUT=3s", "SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:9191"})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case s.Store != "redis" || s.RedisAddr != "10.0.0.1:6380" || s.Redis.URL != "":
		t.Errorf("redis: %q %q %q", s.Store, s.RedisAddr, s.Redis.URL)
	case s.Redis.Username != "u" || s.Redis.Password != "p" || s.Redis.PoolSize != 8 || s.Redis.DialTimeout != 3*time.Second:
		t.Errorf("redis: %+v", s.Redis)
	case !s.ShadowAll || s.limitHeaderNames() == nil || s.limitHeaderNames().Reset != "RateLimit-Reset":
		t.Errorf("modes: %v %q", s.ShadowAll, s.LimitHeaders)
	case s.metricsListener() == nil || s.metricsListener().Addr != "127.0.0.1:9191" || s.metricsListener().Path != "/metrics":
		t.Errorf("metrics: %+v", s.metricsListener())
	case s.Redis.Timeout != 15*time.Millisecond || s.MaxBuckets != 1_000_000 || s.ClientReasonHeader:
		t.Errorf("tokengate's defaults: %v %d, client reason header %v", s.Redis.Timeout, s.MaxBuckets, s.ClientReasonHeader)
	}
	// Envoy Gateway's environment lands in the xDS and gRPC TLS settings.
	s, _, err = compatSettings([]string{"RUNTIME_ROOT=/data", subdir, "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false", "LOG_LEVEL=info", "USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis.svc:6379",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml"})
	if err != nil {
		t.Fatalf("Envoy Gateway's environment: %v", err)
	}
	if x := s.XDS; x.Server != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" || x.CAFile != "/certs/ca.crt" || x.CertFile != "/certs/tls.crt" || !x.ForceStart || s.Policy != "" {
		t.Errorf("xDS: %+v, policy %q", x, s.Policy)
	}
	if g := s.GRPCTLS; g.CertFile != "/certs/tls.crt" || g.KeyFile != "/certs/tls.key" || g.ClientCAFile != "" || g.RequireClientCert {
		t.Errorf("gRPC TLS: %+v", g)
	}
	if _, _, err := compatSettings([]string{subdir, "REDIS_POOL_SIZE=ten"}); err == nil || !strings.Contains(err.Error(), `REDIS_POOL_SIZE: "ten" for --redis-pool-size: want a whole number`) {
		t.Errorf("REDIS_POOL_SIZE=ten: %v", err)
	}
}

// Every flag the mapping gives is a setting of settingsTable, every mapped variable of compatVars is read
// by the mapping, and every variable is listed once.
func TestCompatEnvFlagsExist(t *testing.T) {
	var s settings
	b := bindSettings(&s)
	envs := [][]string{
		{subdir, "USE_PROMETHEUS=true", "SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "GRPC_SERVER_USE_TLS=true", "GRPC_CLIENT_TLS_CACERT=/ca",
			"REDIS_TLS=true", "REDIS_TLS_CACERT=/ca", "REDIS_TLS_CLIENT_CERT=/c", "REDIS_AUTH=u:p", "REDIS_POOL_SIZE=1", "REDIS_TIMEOUT=1s",
			"CACHE_KEY_PREFIX=p", "LOCAL_CACHE_SIZE_IN_BYTES=1", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"},
		{"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=m,s:1", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA=a=b", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/ca", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/c", "CONFIG_GRPC_XDS_SERVER_TLS_SAN=n"},
		{subdir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL=a:1"},
	}
	read := map[string]bool{}
	for _, env := range envs {
		got, e := mapCompat(env...)
		if err := errors.Join(e.errs...); err != nil {
			t.Fatal(err)
		}
		maps.Copy(read, e.read)
		for flag := range got {
			if _, _, ok := b.lookup(flag); !ok {
				t.Errorf("the mapping gives --%s, which is no setting", flag)
			}
		}
	}
	seen := map[string]bool{}
	for _, rv := range compatVars {
		if rv.kind == compatMapped && !read[rv.name] {
			t.Errorf("%s is mapped, but the mapping never reads it", rv.name)
		}
		if seen[rv.name] {
			t.Errorf("%s listed twice", rv.name)
		}
		seen[rv.name] = true
	}
}
