package redisconn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
)

// dialT dials cfg, closing the client when the test ends.
func dialT(t *testing.T, cfg Config) rueidis.Client {
	t.Helper()
	c, err := Dial(cfg)
	if err != nil {
		t.Fatalf("dial %+v: %v", cfg, err)
	}
	t.Cleanup(c.Close)
	return c
}

// writeThrough dials cfg and increments key twice through the client: a
// write reaches Redis, and its answer comes back.
func writeThrough(t *testing.T, key string, cfg Config) {
	t.Helper()
	c := dialT(t, cfg)
	for want := int64(1); want <= 2; want++ {
		if n, err := c.Do(context.Background(), c.B().Incr().Key(key).Build()).AsInt64(); err != nil || n != want {
			t.Fatalf("INCR through %+v: %d %v, want %d", cfg, n, err, want)
		}
	}
}

// TestDialSentinel: with a Sentinel address and a master set name, the
// client finds the master through the Sentinel and writes there.
func TestDialSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "tokengate-master", master)
	writeThrough(t, "via-sentinel", Config{Addr: sentinel.Addr(), SentinelMaster: "tokengate-master"})
	if n, err := redistest.Do(master.Addr(), "DBSIZE"); err != nil || n == "0" {
		t.Fatalf("the master holds %s keys (%v): the write did not reach it", n, err)
	}
}

// TestDialTLS: rediss:// with the CA file of a private CA reaches a
// TLS-only port; without the CA the certificate is refused.
func TestDialTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	writeThrough(t, "via-url", Config{URL: "rediss://" + srv.TLSAddr(), CAFile: srv.CAFile})
	writeThrough(t, "via-addr", Config{Addr: srv.TLSAddr(), CAFile: srv.CAFile})
	c, err := Dial(Config{URL: "rediss://" + srv.TLSAddr()})
	if err == nil {
		c.Close()
		t.Fatal("a certificate of an unknown CA was accepted")
	}
	if !strings.Contains(err.Error(), "certificate") || !errors.Is(err, ErrConfig) {
		t.Fatalf("refusal does not name the certificate, or is not ErrConfig: %v", err)
	}
}

// TestDialMutualTLS: a Redis that asks for a client certificate accepts
// CertFile and KeyFile; TLS with the system's CAs alone refuses its
// private CA; a certificate without its key is refused before dialling.
func TestDialMutualTLS(t *testing.T) {
	srv := redistest.StartTLS(t, "--tls-auth-clients", "yes")
	writeThrough(t, "mtls", Config{Addr: srv.TLSAddr(), CAFile: srv.CAFile, CertFile: srv.ClientCert, KeyFile: srv.ClientKey})
	for name, cfg := range map[string]Config{
		"system CAs":       {Addr: srv.TLSAddr(), TLS: true, CertFile: srv.ClientCert, KeyFile: srv.ClientKey},
		"no key":           {Addr: srv.TLSAddr(), CAFile: srv.CAFile, CertFile: srv.ClientCert},
		"key for the cert": {Addr: srv.TLSAddr(), CAFile: srv.CAFile, CertFile: srv.ClientCert, KeyFile: srv.CAFile},
	} {
		c, err := Dial(cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: not ErrConfig: %v", name, err)
		}
	}
}

// TestDialTLSConfigErrors: a CA file that cannot serve, a certificate the
// CA file does not sign or that is for another host, and TLS on one side
// only are ErrConfig, named in the error with the field of Config (or the
// name Config.Names gives it) and the file or address, against real TLS
// and plaintext ports.
func TestDialTLSConfigErrors(t *testing.T) {
	srv := redistest.StartTLS(t)
	other := redistest.StartTLS(t) // another CA
	mutual := redistest.StartTLS(t, "--tls-auth-clients", "yes")
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	missing := filepath.Join(dir, "missing.pem")
	empty := write("empty.pem", "")
	keyOnly := write("key.pem", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
	badCert := write("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	tlsPort, plainPort := srv.TLSAddr(), srv.Addr()
	// Redis waits for more of a ClientHello (its NUL bytes hide the line
	// ends); a server that answers at once fails the handshake itself.
	answering := listen(t, func(c net.Conn) {
		io.WriteString(c, "-ERR unknown command\r\n")
		io.Copy(io.Discard, c) // until the client closes: no reset to race the reply
		c.Close()
	})
	_, port, _ := net.SplitHostPort(tlsPort)
	names := map[string]string{"CAFile": "--ca", "Addr": "--addr"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // in the error's text
	}{
		{"CA file missing", Config{Addr: tlsPort, CAFile: missing}, []string{"CAFile", missing, "no such file"}},
		{"CA file a directory", Config{Addr: tlsPort, CAFile: dir}, []string{"CAFile", dir, "is a directory"}},
		{"CA file empty", Config{Addr: tlsPort, CAFile: empty}, []string{"CAFile " + empty, "no PEM certificate in it"}},
		{"CA file a key", Config{Addr: tlsPort, CAFile: keyOnly}, []string{"CAFile " + keyOnly, "no PEM certificate in it, only EC PRIVATE KEY"}},
		{"CA file a bad certificate", Config{Addr: tlsPort, CAFile: badCert}, []string{"CAFile " + badCert, "certificate 1"}},
		{"CA file named", Config{Addr: tlsPort, CAFile: badCert, Names: names}, []string{"--ca " + badCert, "certificate 1"}},
		{"another CA", Config{Addr: tlsPort, CAFile: other.CAFile}, []string{tlsPort, "not signed by a CA in CAFile " + other.CAFile}},
		{"no CA file", Config{URL: "rediss://" + tlsPort}, []string{tlsPort, "not signed by a CA the system trusts", "set CAFile"}},
		{"another host", Config{URL: "rediss://localhost:" + port, CAFile: srv.CAFile}, []string{"localhost:" + port, "certificate is for another host"}},
		{"client certificate required", Config{Addr: mutual.TLSAddr(), CAFile: mutual.CAFile}, []string{mutual.TLSAddr(), "refused TLS", "certificate required", "tls-auth-clients"}},
		{"TLS against plaintext", Config{Addr: plainPort, CAFile: srv.CAFile}, []string{plainPort, "is a plaintext port but TLS is on (CAFile)", "point Addr at"}},
		{"TLS against plaintext, named", Config{Addr: plainPort, CAFile: srv.CAFile, Names: names}, []string{plainPort, "is a plaintext port but TLS is on (--ca)", "point --addr at"}},
		{"rediss:// against plaintext", Config{URL: "rediss://" + plainPort}, []string{plainPort, "is a plaintext port but TLS is on (the rediss:// URL)", "point URL at"}},
		{"TLS against a server answering", Config{Addr: answering, CAFile: srv.CAFile}, []string{answering, "is a plaintext port", "first record does not look like a TLS handshake"}},
		{"plaintext against TLS", Config{Addr: tlsPort}, []string{tlsPort, "speaks TLS but TLS is off", "set CAFile"}},
		{"redis:// against TLS", Config{URL: "redis://" + tlsPort}, []string{tlsPort, "speaks TLS but TLS is off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DialTimeout = 300 * time.Millisecond
			c, err := Dial(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			t.Log(err)
			if !errors.Is(err, ErrConfig) {
				t.Errorf("not ErrConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
		})
	}
}

// TestDialOutageIsNotConfig: Redis down, or something in its place that
// accepts connections and closes them or never answers (a proxy with no
// backend), is an outage with TLS on or off, never ErrConfig.
func TestDialOutageIsNotConfig(t *testing.T) {
	srv := redistest.StartTLS(t)
	srv.Stop()
	closing := listen(t, func(c net.Conn) { c.Close() })
	silent := listen(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	for _, addr := range []string{srv.Addr(), srv.TLSAddr(), closing, silent} {
		for _, caFile := range []string{"", srv.CAFile} {
			cfg := Config{Addr: addr, CAFile: caFile, DialTimeout: 200 * time.Millisecond}
			c, err := Dial(cfg)
			if err == nil {
				c.Close()
				t.Fatalf("%+v: connected", cfg)
			}
			t.Logf("%s, CA %q: %v", addr, caFile, err)
			if errors.Is(err, ErrConfig) {
				t.Errorf("%+v: ErrConfig: %v", cfg, err)
			}
		}
	}
}

// listen serves each connection to 127.0.0.1:0 with handle until the test
// ends, and returns the address.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}

// TestPoolSize: a pool size is rounded down to a power of two, at most
// MaxPoolSize, so that the sizes the client would refuse (512 and up;
// envoyproxy/ratelimit deployments often set 1000) connect.
func TestPoolSize(t *testing.T) {
	for size, want := range map[int]int{0: 0, 1: 1, 10: 8, 256: 256, 511: 256, 512: 256, 1000: 256, 1 << 20: 256} {
		if got := (Config{PoolSize: size}).PoolConnections(); got != want {
			t.Errorf("PoolSize %d: %d connections, want %d", size, got, want)
		}
	}
	srv := redistest.Start(t)
	c, err := Dial(Config{Addr: srv.Addr(), PoolSize: 1000})
	if err != nil {
		t.Fatalf("PoolSize 1000: %v", err)
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PoolSize 1000: ping: %v", err)
	}
}
