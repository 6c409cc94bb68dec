package blackbox

// "compat" means envoyproxy/ratelimit's contract. The binary as
// envoyproxy/ratelimit's process: invoked as ratelimit, configured by that
// service's environment alone.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/internal/tlstest"
	"github.com/tokengate/tokengate/internal/xdstest"
	"github.com/tokengate/tokengate/pkg/tlsfiles"
)

const compatConfig = "../../pkg/policy/testdata/envoyproxy/"

// freePort is a loopback port free now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// runtimeDir lays out $RUNTIME_ROOT/ratelimit/config/ with the files of
// src, unchanged, and returns RUNTIME_ROOT.
func runtimeDir(t *testing.T, src string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFiles(t, src, dir)
	return root
}

// copyFiles copies the files of directory src, unchanged, into dst.
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tgproc.WritePolicy(t, filepath.Join(dst, e.Name()), string(data))
	}
}

// compatEnv is the environment of a ratelimit process on the runtime root,
// with Redis at addr, logging JSON at info (so that tgproc sees it serve).
func compatEnv(root, redisAddr string, extra ...string) []string {
	return append([]string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "USE_STATSD=false", "LOG_LEVEL=info", "LOG_FORMAT=json",
	}, extra...)
}

// loopback is the environment that puts a ratelimit process's listeners on
// 127.0.0.1: HTTP on port, gRPC and debug on free ports.
func loopback(port string) []string {
	return []string{"HOST=127.0.0.1", "PORT=" + port, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}
}

type compatWant struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       uint32
	unit      string
	remaining uint32
}

func expectCompat(t *testing.T, what string, r *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, ws ...compatWant) {
	t.Helper()
	if r.OverallCode != overall || len(r.Statuses) != len(ws) {
		t.Fatalf("%s: %v, want overall %v", what, r, overall)
	}
	for i, w := range ws {
		st := r.Statuses[i]
		limitOK := st.CurrentLimit.GetRequestsPerUnit() == w.rpu && st.CurrentLimit.GetUnit().String() == w.unit
		if w.unit == "" { // no current_limit
			limitOK = st.CurrentLimit == nil
		}
		if st.Code != w.code || st.LimitRemaining != w.remaining || !limitOK {
			t.Fatalf("%s: status %d: %v, want %+v", what, i, st, w)
		}
	}
}

// The reference's integration-test configuration, served from Redis by
// the binary invoked as ratelimit on the ports its environment names: the
// reference's request sequences for a fresh burst give the codes,
// current_limit and limit_remaining its tests expect; /healthcheck and
// /json on PORT, /rlconfig on DEBUG_PORT, metrics on PROMETHEUS_ADDR; a new
// file of the directory is served.
func TestRatelimitProcess(t *testing.T) {
	rd := redistest.Start(t)
	root := runtimeDir(t, compatConfig+"integration")
	port, grpcPort, debugPort, promPort := freePort(t), freePort(t), freePort(t), freePort(t)
	p := tgproc.StartAs(t, binary, "ratelimit", compatEnv(root, rd.Addr(),
		"HOST=127.0.0.1", "PORT="+port, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+promPort, "PROMETHEUS_PATH=/prom", "CACHE_KEY_PREFIX=rltest:")...)
	for name, got := range map[string][2]string{
		"PORT": {p.HTTPAddr, port}, "GRPC_PORT": {p.GRPCAddr, grpcPort}, "DEBUG_PORT": {p.DebugAddr, debugPort}, "PROMETHEUS_ADDR": {p.MetricsAddr, promPort},
	} {
		if got[0] != "127.0.0.1:"+got[1] {
			t.Errorf("%s: listening on %q, want port %s", name, got[0], got[1])
		}
	}

	// testBasicBaseConfig.
	expectCompat(t, "unknown domain", p.Ask(t, "foo", 1, tgproc.Descriptor("hello", "world")), ok, compatWant{code: ok})
	expectCompat(t, "key1", p.Ask(t, "basic", 1, tgproc.Descriptor("key1", "foo")), ok, compatWant{ok, 50, "SECOND", 49})
	for i := range 25 {
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		expectCompat(t, fmt.Sprintf("key2 #%d", i), p.Ask(t, "another", 1, tgproc.Descriptor("key2", "12345")), code, compatWant{code, 20, "MINUTE", remaining})
	}
	for i := range 15 {
		code, r1, r2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 { // every hit counted, key2's too (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false)
			code, r2 = over, 0
		}
		expectCompat(t, fmt.Sprintf("key2+key3 #%d", i), p.Ask(t, "another", 1, tgproc.Descriptor("key2", "6789"), tgproc.Descriptor("key3", "6789")), code,
			compatWant{ok, 20, "MINUTE", r1}, compatWant{code, 10, "HOUR", r2})
	}
	// testShareThreshold.
	for i := range 10 {
		expectCompat(t, fmt.Sprintf("files/a.pdf #%d", i), p.Ask(t, "share-threshold-test", 1, tgproc.Descriptor("files", "files/a.pdf")), ok, compatWant{ok, 10, "HOUR", uint32(9 - i)})
	}
	expectCompat(t, "files/b.csv", p.Ask(t, "share-threshold-test", 1, tgproc.Descriptor("files", "files/b.csv")), over, compatWant{over, 10, "HOUR", 0})
	if keys, err := redistest.Do(rd.Addr(), "KEYS", "rltest:*"); err != nil || keys == "" {
		t.Errorf("no bucket in Redis under CACHE_KEY_PREFIX: %q, %v", keys, err)
	}

	if code, body := p.Get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	resp, err := http.Post("http://"+p.HTTPAddr+"/json", "application/json",
		strings.NewReader(`{"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "j"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		OverallCode string
		Statuses    []struct {
			Code         string
			CurrentLimit struct {
				RequestsPerUnit int
				Unit            string
			}
			LimitRemaining int
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&js)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || js.OverallCode != "OK" || len(js.Statuses) != 1 || js.Statuses[0].CurrentLimit.Unit != "MINUTE" || js.Statuses[0].LimitRemaining != 0 {
		t.Errorf("/json: %d %+v %v", resp.StatusCode, js, err)
	}
	if resp, err := http.Post("http://"+p.HTTPAddr+"/json", "application/json",
		strings.NewReader(`{"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "j"}]}]}`)); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("/json over the limit: %v %v", resp, err)
	}
	code, body := tgproc.GetURL(t, "http://"+p.DebugAddr+"/rlconfig")
	if code != 200 || !strings.Contains(body, "basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("/rlconfig: %d %q", code, body)
	}
	if code, body := tgproc.GetURL(t, "http://"+p.MetricsAddr+"/prom"); code != 200 || !strings.Contains(body, `tokengate_decisions_total{domain="another"`) {
		t.Errorf("metrics on PROMETHEUS_ADDR/prom: %d %.300q", code, body)
	}

	// Hot reload: the reference's reload.yaml joins the directory.
	data, err := os.ReadFile(compatConfig + "reload/reload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tgproc.WritePolicy(t, filepath.Join(root, "ratelimit", "config", "reload.yaml"), string(data))
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Ask(t, "reload", 1, tgproc.Descriptor("block", "foo")).OverallCode == over
	}, "reload.yaml served")
}

// SHADOW_MODE and LIMIT_RESPONSE_HEADERS_ENABLED, end to end.
func TestRatelimitShadowAndHeaders(t *testing.T) {
	rd := redistest.Start(t)
	p := tgproc.StartAs(t, binary, "ratelimit", compatEnv(runtimeDir(t, compatConfig+"integration"), rd.Addr(),
		append(loopback("0"), "SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left")...)...)
	// A decision past the 15 ms store timeout (a loaded machine) is
	// answered by on_store_error, degraded, and may yet be charged: the
	// two are asked again, of a new bucket, until Redis answers both.
	var rs [2]*rlsv3.RateLimitResponse
	attempt := 0
	poll.Eventually(t, 10*time.Second, func() bool {
		attempt++
		for i := range rs {
			if rs[i] = p.Ask(t, "basic", 1, tgproc.Descriptor("one_per_minute", "s"+strconv.Itoa(attempt))); tgproc.Degraded(rs[i]) {
				return false
			}
		}
		return true
	}, "two answers from Redis")
	for i, r := range rs {
		code := map[bool]rlsv3.RateLimitResponse_Code{true: ok, false: over}[i == 0]
		expectCompat(t, fmt.Sprintf("one_per_minute #%d", i), r, ok, compatWant{code, 1, "MINUTE", 0})
		if tgproc.Header(r, "RateLimit-Limit") != "1" || tgproc.Header(r, "X-Left") != "0" || tgproc.Header(r, "RateLimit-Reset") == "" {
			t.Fatalf("#%d: headers %v", i, r.ResponseHeadersToAdd)
		}
	}
}

// Unset, LOG_LEVEL is the reference's WARN: nothing below it is logged;
// LOG_FORMAT text is text.
func TestRatelimitLogDefaults(t *testing.T) {
	rd := redistest.Start(t)
	port := freePort(t)
	env := without(compatEnv(runtimeDir(t, compatConfig+"integration"), rd.Addr(), loopback(port)...), "LOG_LEVEL=info", "LOG_FORMAT=json")
	env = append(env, "NEAR_LIMIT_RATIO=0.9") // inert: logged at info, so not at WARN
	cmd := tgproc.CommandAs(t, binary, "ratelimit", env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []string, 1)
	go func() {
		var all []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all = append(all, sc.Text())
		}
		lines <- all
	}()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "/healthcheck OK")
	cmd.Process.Signal(syscall.SIGTERM)
	var all []string
	select {
	case all = <-lines:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("no exit after SIGTERM")
	}
	cmd.Wait()
	// The warning about Redis's memory settings is logged (test Redis sets
	// no maxmemory), as text.
	if !strings.Contains(strings.Join(all, "\n"), "level=WARN msg=\"redis does not bound") {
		t.Errorf("no WARN line in text: %q", all)
	}
	for _, l := range all {
		if strings.Contains(l, "level=INFO") || strings.Contains(l, "level=DEBUG") || strings.HasPrefix(l, "{") {
			t.Errorf("at the default LOG_LEVEL WARN and LOG_FORMAT text: %q", l)
		}
	}
}

// without removes from s, in place, every element equal to one of drop.
func without(s []string, drop ...string) []string {
	return slices.DeleteFunc(s, func(v string) bool { return slices.Contains(drop, v) })
}

// Each unsupported variable stops the start with a message naming it, as
// do arguments and a TOKENGATE_* variable.
func TestRatelimitRefuses(t *testing.T) {
	root := runtimeDir(t, compatConfig+"integration")
	for _, tc := range []struct {
		env  []string
		args bool
		want string
	}{
		{env: []string{"MEMCACHE_HOST_PORT=memcache:11211"}, want: "MEMCACHE_HOST_PORT"},
		{env: []string{"BACKEND_TYPE=memcache"}, want: "BACKEND_TYPE"},
		{env: []string{"USE_STATSD=true"}, want: "USE_STATSD"},
		{env: []string{"USE_DOG_STATSD=true"}, want: "USE_DOG_STATSD"},
		{env: []string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_URL=r2:6379"}, want: "REDIS_PERSECOND_URL"},
		{env: []string{"TRACING_ENABLED=true"}, want: "TRACING_ENABLED"},
		{env: []string{"GRPC_UDS=/tmp/rl.sock"}, want: "GRPC_UDS"},
		{env: []string{"TOKENGATE_STORE=memory"}, want: "TOKENGATE_STORE"},
		{env: []string{"RUNTIME_ROOT=" + filepath.Join(root, "nowhere")}, want: "nowhere"},
		{args: true, want: "takes no arguments"},
	} {
		env := append(compatEnv(root, "127.0.0.1:1"), tc.env...)
		cmd := tgproc.CommandAs(t, binary, "ratelimit", env...)
		if tc.args {
			cmd.Args = append(cmd.Args, "--policy", "x")
		}
		out, err := cmd.CombinedOutput()
		if err == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v\n%s", tc.env, err, out)
		}
	}
}

// The REDIS_* variables end to end: mutual TLS (REDIS_TLS, its CA and
// client certificate) and a Sentinel set (REDIS_TYPE=SENTINEL), each
// deciding in the Redis they name.
func TestRatelimitRedisEnv(t *testing.T) {
	root := runtimeDir(t, compatConfig+"integration")
	tlsSrv := redistest.StartTLS(t, "--tls-auth-clients", "yes")
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "rl-master", master)
	for _, tc := range []struct {
		name  string
		env   []string
		redis string // where the bucket must be
	}{
		{"mutual TLS", []string{"REDIS_URL=" + tlsSrv.TLSAddr(), "REDIS_TLS=true", "REDIS_TLS_CACERT=" + tlsSrv.CAFile,
			"REDIS_TLS_CLIENT_CERT=" + tlsSrv.ClientCert, "REDIS_TLS_CLIENT_KEY=" + tlsSrv.ClientKey}, tlsSrv.Addr()},
		{"sentinel", []string{"REDIS_TYPE=SENTINEL", "REDIS_URL=rl-master," + sentinel.Addr()}, master.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(compatEnv(root, "unused", loopback("0")...), tc.env...)
			p := tgproc.StartAs(t, binary, "ratelimit", env...)
			// The first calls on a new (TLS) connection of a race build
			// may pass the 15ms store timeout: on_store_error answers
			// them, charging nothing. Ask until Redis does.
			poll.Eventually(t, 10*time.Second, func() bool {
				return !tgproc.Degraded(p.Ask(t, "basic", 0, tgproc.Descriptor("key1", "warm "+tc.name)))
			}, "an answer from Redis")
			expectCompat(t, "key1", p.Ask(t, "basic", 1, tgproc.Descriptor("key1", tc.name)), ok, compatWant{ok, 50, "SECOND", 49})
			if n, err := redistest.Do(tc.redis, "DBSIZE"); err != nil || n == "0" {
				t.Errorf("%s holds %s keys (%v)", tc.redis, n, err)
			}
		})
	}
}

// RUNTIME_WATCH_ROOT true (the default): RUNTIME_ROOT is a symbolic link
// that a deployment swaps to a new tree, as the reference's goruntime
// expects; the new tree is served (within the watcher's poll, 10s).
func TestRatelimitRootSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the watcher's poll")
	}
	rd := redistest.Start(t)
	base := t.TempDir()
	v1, v2 := runtimeDir(t, compatConfig+"integration"), runtimeDir(t, compatConfig+"reload")
	current := filepath.Join(base, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	env := without(compatEnv(current, rd.Addr(), loopback("0")...), "RUNTIME_WATCH_ROOT=false")
	p := tgproc.StartAs(t, binary, "ratelimit", append(env, "RUNTIME_WATCH_ROOT=true")...)
	expectCompat(t, "reload domain before the swap", p.Ask(t, "reload", 1, tgproc.Descriptor("block", "x")), ok, compatWant{code: ok})
	// ln -sfn: a new link renamed over the old one.
	next := filepath.Join(base, "next")
	if err := os.Symlink(v2, next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, current); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Ask(t, "reload", 1, tgproc.Descriptor("block", "x")).OverallCode == over
	}, "the swapped tree served")
}

// Envoy Gateway's environment (its internal/infrastructure/kubernetes/
// ratelimit sets these), with a management server over mTLS as Envoy
// Gateway's: the binary invoked as ratelimit is ready before the first
// config (FORCE_START_WITHOUT_INITIAL_CONFIG), takes the config over xDS,
// serves gRPC over TLS without asking Envoy for a certificate
// (GRPC_SERVER_TLS_CA_CERT is not the reference's variable), and serves
// the metrics on PROMETHEUS_ADDR.
func TestRatelimitEnvoyGateway(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "envoy-gateway")
	xdsPair, rlServer, rlClient := ca.Server(t, dir, "xds", "localhost"), ca.Server(t, dir, "ratelimit", "localhost"), ca.Client(t, dir, "envoy-ratelimit")
	xdsFiles, err := tlsfiles.Load(xdsPair.CertFile, xdsPair.KeyFile, ca.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := xdstest.Start(t, "127.0.0.1:0", xdsFiles.ServerConfig(true))
	rd := redistest.Start(t)
	port, promPort := freePort(t), freePort(t)
	p := tgproc.StartAs(t, binary, "ratelimit",
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL="+m.Addr, "CONFIG_GRPC_XDS_NODE_ID="+xdstest.NodeID,
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+rlServer.CertFile, "GRPC_SERVER_TLS_KEY="+rlServer.KeyFile, "GRPC_SERVER_TLS_CA_CERT="+ca.CAFile,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+rlClient.CertFile, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+rlClient.KeyFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+ca.CAFile, "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rd.Addr(),
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+promPort, "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
		// Not Envoy Gateway's: loopback ports, JSON logs for the harness.
		"HOST=127.0.0.1", "PORT="+port, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_FORMAT=json")
	if code, body := p.Get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck before the first config, forced to start: %d %q", code, body)
	}
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: xdsFiles.Pool(), ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() *rlsv3.RateLimitResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{tgproc.Descriptor("user", "ann")}})
		if err != nil {
			t.Fatalf("ShouldRateLimit over TLS: %v", err)
		}
		return r
	}
	if got := answers(t, ask, 3); got != "OK OK OK" {
		t.Fatalf("before the first config: %s", got)
	}
	m.Set(t, "1", xdstest.PerUser("edge", 2, rlsconf.RateLimitUnit_MINUTE))
	poll.Eventually(t, tgproc.Timeout, func() bool { return ask().OverallCode == over }, "the config from xDS served")
	if code, body := tgproc.GetURL(t, "http://127.0.0.1:"+promPort+"/metrics"); code != 200 || !strings.Contains(body, `tokengate_decisions_total{domain="edge"`) {
		t.Errorf("metrics on PROMETHEUS_ADDR: %d %.300q", code, body)
	}
}
