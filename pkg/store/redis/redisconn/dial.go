package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Config says how to reach Redis; cmd/tokengate fills it from its
// --redis-* settings.
type Config struct {
	// Addr is host:port; several, comma-separated, are Cluster seed nodes
	// or, with SentinelMaster, the Sentinels.
	Addr string
	// URL, when set, replaces Addr: redis://[user:password@]host:port[/db]
	// or rediss:// for TLS (see rueidis.ParseURL for the query options).
	URL string
	// Password (and Username) authenticate; they override the URL's.
	Username, Password string
	// DB selects a database (single node and Sentinel only).
	DB int
	// PoolSize is the connections per Redis node, rounded down to a power
	// of two, at most MaxPoolSize (PoolConnections); commands are pipelined
	// over them [0: the client's default, 4 per node, 1 per Cluster node].
	// Larger sizes, which envoyproxy/ratelimit's deployments often set
	// (REDIS_POOL_SIZE=1000), are taken as MaxPoolSize: the client would
	// refuse them, and pipelined connections need far fewer.
	PoolSize int
	// DialTimeout bounds connecting and detects a dead connection
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// SentinelMaster names the master set; Addr then lists Sentinels.
	SentinelMaster string
	// Cluster requires Addr to be a Redis Cluster (a client finds out by
	// itself, but an explicit setting fails fast on the wrong address).
	Cluster bool
	// CAFile, when set, is a PEM file of the certificate authorities that
	// sign Redis's TLS certificate (a private CA, as Redis deployments
	// usually have); it turns TLS on for Addr too.
	CAFile string
	// TLS turns TLS on with the system's certificate authorities (CAFile
	// replaces them).
	TLS bool
	// CertFile and KeyFile, both or neither, are the PEM client
	// certificate and key that Redis's TLS asks for (mTLS); they turn TLS on.
	CertFile, KeyFile string
	// Names, when set, are what Dial's errors call the fields of Config,
	// by field name ("CAFile": "--redis-ca-file" for cmd/tokengate, whose
	// users know its flags); a field it leaves out is called by its name.
	Names map[string]string
}

// DefaultDialTimeout is Config.DialTimeout's default.
const DefaultDialTimeout = time.Second

// MaxPoolSize is the most connections per node Dial opens: the client
// pipelines over 2^rueidis.MaxPipelineMultiplex connections at most.
const MaxPoolSize = 1 << rueidis.MaxPipelineMultiplex

// PoolConnections is the connections per node Dial opens for PoolSize, 0
// for the client's default.
func (cfg Config) PoolConnections() int {
	if cfg.PoolSize <= 0 {
		return 0
	}
	return 1 << min(bits.Len(uint(cfg.PoolSize))-1, rueidis.MaxPipelineMultiplex)
}

// name is what errors call the field of Config named field.
func (cfg Config) name(field string) string {
	if n, ok := cfg.Names[field]; ok {
		return n
	}
	return field
}

// ErrConfig marks the errors of Dial that no retry fixes until a setting
// changes, on this side or on Redis's: a bad URL, address or CA file (the
// errors of Check, which only this side can fix), TLS on against a
// plaintext port or off against a TLS one, a certificate that the CA file
// does not sign or that is for another host, a wrong password, or an
// address that is not the Cluster asked for. Test for it with errors.Is;
// the error's text names the field of Config (see Config.Names) and the
// file or address. Any other error of Dial is an outage (Redis down,
// unreachable or too slow, a name that does not resolve) that a later
// Dial may get past.
var ErrConfig = errors.New("redis: configuration error")

// configError is an error of Dial that is ErrConfig.
type configError struct{ err error }

func (e configError) Error() string        { return e.err.Error() }
func (e configError) Unwrap() error        { return e.err }
func (e configError) Is(target error) bool { return target == ErrConfig }

func configErrorf(format string, args ...any) error {
	return configError{fmt.Errorf(format, args...)}
}

// Check reports what is wrong in cfg itself, before any connection: a bad
// URL or address, a CA, certificate or key file that does not read. Its
// error is ErrConfig; nothing outside the settings can fix it, where Redis
// or its network can fix any other error of Dial.
func (cfg Config) Check() error {
	if _, err := cfg.clientOption(); err != nil {
		return configError{err}
	}
	return nil
}

// Dial connects to Redis as cfg says. The caller closes the client. An
// error that is ErrConfig says what to change; when a connection is made
// but fails in a way that may be TLS on one side only, Dial probes the
// address once more to tell which (see explain).
func Dial(cfg Config) (rueidis.Client, error) {
	opt, err := cfg.clientOption()
	if err != nil {
		return nil, configError{err}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, cfg.explain(opt, err)
	}
	if cfg.Cluster && c.Mode() != rueidis.ClientModeCluster {
		c.Close()
		return nil, configErrorf("redis: %s is set but %v is not a Redis Cluster (mode %s)", cfg.name("Cluster"), opt.InitAddress, c.Mode())
	}
	return c, nil
}

func (cfg Config) clientOption() (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	if cfg.URL != "" {
		var err error
		if opt, err = rueidis.ParseURL(cfg.URL); err != nil {
			return opt, fmt.Errorf("redis: URL: %w", err)
		}
		if strings.HasPrefix(cfg.URL, "unix:") && opt.InitAddress[0] == "" {
			// The dial would fail only later, as "dial unix: missing address".
			return opt, fmt.Errorf("redis: %s %q has no socket path: unix:///path/to/redis.sock for a socket, redis://host:port for TCP", cfg.name("URL"), cfg.URL)
		}
	} else {
		for a := range strings.SplitSeq(cfg.Addr, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return opt, fmt.Errorf("redis: %s %q: want host:port (a Unix socket is %s unix:///path/to/redis.sock): %w", cfg.name("Addr"), a, cfg.name("URL"), err)
			}
			opt.InitAddress = append(opt.InitAddress, a)
		}
		if len(opt.InitAddress) == 0 {
			return opt, errors.New("redis: no address")
		}
		opt.SelectDB = cfg.DB
	}
	if cfg.Username != "" {
		opt.Username = cfg.Username
	}
	if cfg.Password != "" {
		opt.Password = cfg.Password
	}
	if cfg.CAFile != "" {
		pool, err := cfg.readCA()
		if err != nil {
			return opt, err
		}
		if opt.TLSConfig == nil {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		opt.TLSConfig.RootCAs = pool
	}
	if (cfg.TLS || cfg.CertFile != "" || cfg.KeyFile != "") && opt.TLSConfig == nil {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return opt, fmt.Errorf("redis: %s and %s go together", cfg.name("CertFile"), cfg.name("KeyFile"))
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return opt, fmt.Errorf("redis: %s %s, %s %s: %w", cfg.name("CertFile"), cfg.CertFile, cfg.name("KeyFile"), cfg.KeyFile, err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	if opt.DialCtxFn == nil { // nil but for unix:// URLs
		opt.DialCtxFn = dial
	}
	if cfg.SentinelMaster != "" {
		opt.Sentinel.MasterSet = cfg.SentinelMaster
		opt.Sentinel.Password = opt.Password
		opt.Sentinel.Username = opt.Username
		opt.Sentinel.TLSConfig = opt.TLSConfig
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	if n := cfg.PoolConnections(); n > 0 {
		opt.PipelineMultiplex = bits.Len(uint(n)) - 1
		opt.BlockingPoolSize = n
	}
	d := cfg.DialTimeout
	if d <= 0 {
		d = DefaultDialTimeout
	}
	opt.Dialer.Timeout = d
	opt.ConnWriteTimeout = d
	// Client-side caching is for reads; every call here is a script.
	opt.DisableCache = true
	// A decision is not idempotent: never retry one behind our back.
	opt.DisableRetry = true
	return opt, nil
}

// readCA reads the PEM file CAFile. Every CERTIFICATE block must parse
// (x509.CertPool.AppendCertsFromPEM would skip a bad one silently); other
// blocks are ignored, but a file of nothing else is refused, naming what
// it holds (a key given for the CA, say).
func (cfg Config) readCA() (*x509.CertPool, error) {
	field, path := cfg.name("CAFile"), cfg.CAFile
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", field, err)
	}
	pool := x509.NewCertPool()
	var n int
	var others []string
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			others = append(others, b.Type)
			continue
		}
		n++
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("redis: %s %s: certificate %d: %w", field, path, n, err)
		}
		pool.AddCert(cert)
	}
	switch {
	case n > 0:
		return pool, nil
	case len(others) > 0:
		return nil, fmt.Errorf("redis: %s %s: no PEM certificate in it, only %s", field, path, strings.Join(others, ", "))
	}
	return nil, fmt.Errorf("redis: %s %s: no PEM certificate in it", field, path)
}
