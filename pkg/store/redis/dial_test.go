package redis

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

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// decideThrough dials cfg, decides one request of cost 3 on a new bucket of 10
// twice and checks the answers.
func decideThrough(t *testing.T, key string, cfg Config) {
	t.Helper()
	c, err := Dial(cfg)
	if err != nil {
		t.Fatalf("dial %+v: %v", cfg, err)
	}
	t.Cleanup(c.Close)
	s := newStore(t, c, Options{})
	res := make([]store.Result, 1)
	item := store.Item{Key: key, Version: storetest.Version(t, 1, 10, "1/h"), Cost: 3}
	for want := int64(7); want >= 4; want -= 3 {
		out, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{item}}, res)
		if err != nil || !out.Allowed || res[0].Remaining != want {
			t.Fatalf("decision through %+v: %+v %+v %v, want %d left", cfg, out, res[0], err, want)
		}
	}
}

// TestDialSentinel: with a Sentinel address and a master set name, the
// store finds the master through the Sentinel and decides there.
func TestDialSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "tokengate-master", master)
	decideThrough(t, "via-sentinel", Config{Addr: sentinel.Addr(), SentinelMaster: "tokengate-master"})
	if n, err := redistest.Do(master.Addr(), "DBSIZE"); err != nil || n == "0" {
		t.Fatalf("the master holds %s keys (%v): the decision did not reach it", n, err)
	}
}

// TestDialTLS: rediss:// with the CA file of a private CA reaches a
// TLS-only port; without the CA the certificate is refused.
func TestDialTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	decideThrough(t, "via-url", Config{URL: "rediss://" + srv.TLSAddr(), CAFile: srv.CAFile})
	decideThrough(t, "via-addr", Config{Addr: srv.TLSAddr(), CAFile: srv.CAFile})
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
	decideThrough(t, "mtls", Config{Addr: srv.TLSAddr(), CAFile: srv.CAFile, CertFile: srv.ClientCert, KeyFile: srv.ClientKey})
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
// only are ErrConfig, named in the error with the flag and the file or
// address, against real TLS and plaintext ports.
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
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // in the error's text
	}{
		{"CA file missing", Config{Addr: tlsPort, CAFile: missing}, []string{"--redis-ca-file", missing, "no such file"}},
		{"CA file a directory", Config{Addr: tlsPort, CAFile: dir}, []string{"--redis-ca-file", dir, "is a directory"}},
		{"CA file empty", Config{Addr: tlsPort, CAFile: empty}, []string{"--redis-ca-file " + empty, "no PEM certificate in it"}},
		{"CA file a key", Config{Addr: tlsPort, CAFile: keyOnly}, []string{"--redis-ca-file " + keyOnly, "no PEM certificate in it, only EC PRIVATE KEY"}},
		{"CA file a bad certificate", Config{Addr: tlsPort, CAFile: badCert}, []string{"--redis-ca-file " + badCert, "certificate 1"}},
		{"another CA", Config{Addr: tlsPort, CAFile: other.CAFile}, []string{tlsPort, "not signed by a CA in --redis-ca-file " + other.CAFile}},
		{"no CA file", Config{URL: "rediss://" + tlsPort}, []string{tlsPort, "not signed by a CA the system trusts", "set --redis-ca-file"}},
		{"another host", Config{URL: "rediss://localhost:" + port, CAFile: srv.CAFile}, []string{"localhost:" + port, "certificate is for another host"}},
		{"client certificate required", Config{Addr: mutual.TLSAddr(), CAFile: mutual.CAFile}, []string{mutual.TLSAddr(), "refused TLS", "certificate required", "tls-auth-clients"}},
		{"TLS against plaintext", Config{Addr: plainPort, CAFile: srv.CAFile}, []string{plainPort, "is a plaintext port but TLS is on (--redis-ca-file)", "--redis-addr"}},
		{"rediss:// against plaintext", Config{URL: "rediss://" + plainPort}, []string{plainPort, "is a plaintext port but TLS is on (the rediss:// URL)", "--redis-url"}},
		{"TLS against a server answering", Config{Addr: answering, CAFile: srv.CAFile}, []string{answering, "is a plaintext port", "first record does not look like a TLS handshake"}},
		{"plaintext against TLS", Config{Addr: tlsPort}, []string{tlsPort, "speaks TLS but TLS is off", "--redis-ca-file"}},
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
