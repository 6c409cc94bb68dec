package redisconn

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/redistest"
)

// names are the names cmd/tokengate gives the fields, as errors show them.
var names = map[string]string{"Addr": "--redis-addr", "URL": "--redis-url", "CAFile": "--redis-ca-file",
	"Username": "--redis-username", "Password": "--redis-password-file"}

// TestCheck: Check refuses, as ErrConfig naming the setting, what is wrong
// in the settings themselves, and nothing else: a down or unknown host is
// for Dial to find.
func TestCheck(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "": no error
	}{
		{"address", Config{Addr: "127.0.0.1:1"}, ""},
		{"unknown host", Config{Addr: "nohost.invalid:6379"}, ""},
		{"no address", Config{Addr: " , "}, "redis: no address"},
		{"a socket path as the address", Config{Addr: "/run/redis.sock", Names: names},
			`redis: --redis-addr "/run/redis.sock": want host:port (a Unix socket is --redis-url unix:///path/to/redis.sock): address /run/redis.sock: missing port in address`},
		{"no port", Config{Addr: "a:1, redis", Names: names}, `redis: --redis-addr "redis": want host:port`},
		{"IPv6", Config{Addr: "[::1]:6379"}, ""},
		{"bad URL", Config{URL: "http://r:6379", Names: names}, "redis: URL: redis: invalid URL scheme: http"},
		{"unix URL without a path", Config{URL: "unix://127.0.0.1:6379", Names: names},
			`redis: --redis-url "unix://127.0.0.1:6379" has no socket path: unix:///path/to/redis.sock for a socket, redis://host:port for TCP`},
		{"unix URL", Config{URL: "unix:///run/redis.sock"}, ""},
		{"CA file missing", Config{Addr: "r:6379", CAFile: missing, Names: names}, "redis: --redis-ca-file: open " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("%v, want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestDialSays: what Dial says of a name that does not resolve (an outage,
// since the name may come: not ErrConfig) and of credentials Redis refuses
// (ErrConfig) names the settings to check, against a real Redis.
func TestDialSays(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	for _, tc := range []struct {
		name   string
		cfg    Config
		config bool
		want   []string
	}{
		{"unknown host", Config{Addr: "nohost.invalid:6379"}, false,
			[]string{`redis: nohost.invalid:6379: cannot resolve "nohost.invalid": check --redis-addr`}},
		{"unknown host in the URL", Config{URL: "redis://nohost.invalid:6379"}, false,
			[]string{`cannot resolve "nohost.invalid": check --redis-url`}},
		{"wrong password", Config{Addr: srv.Addr(), Password: "wrong"}, true,
			[]string{"redis: " + srv.Addr() + " refused the credentials: set the user name (--redis-username) and password (--redis-password-file) it expects", "WRONGPASS"}},
		{"no password", Config{Addr: srv.Addr()}, true, []string{"refused the credentials", "NOAUTH"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Names, tc.cfg.DialTimeout = names, time.Second
			c, err := Dial(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			if errors.Is(err, ErrConfig) != tc.config {
				t.Errorf("ErrConfig %v, want %v: %v", !tc.config, tc.config, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("the password is in the error: %v", err)
			}
		})
	}
}
