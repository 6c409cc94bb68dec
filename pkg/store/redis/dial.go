package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/bits"
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
	// of two; commands are pipelined over them [0: the client's default,
	// 4 per node, 1 per Cluster node].
	PoolSize int
	// DialTimeout bounds connecting and detects a dead connection [1s].
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
}

// Dial connects to Redis as cfg says. The caller closes the client.
func Dial(cfg Config) (rueidis.Client, error) {
	opt, err := cfg.clientOption()
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect to %v: %w", opt.InitAddress, err)
	}
	if cfg.Cluster && c.Mode() != rueidis.ClientModeCluster {
		c.Close()
		return nil, fmt.Errorf("redis: --redis-cluster is set but %v is not a Redis Cluster (mode %s)", opt.InitAddress, c.Mode())
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
	} else {
		for a := range strings.SplitSeq(cfg.Addr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				opt.InitAddress = append(opt.InitAddress, a)
			}
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
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return opt, fmt.Errorf("redis: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opt, fmt.Errorf("redis: CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		if opt.TLSConfig == nil {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		opt.TLSConfig.RootCAs = pool
	}
	if cfg.SentinelMaster != "" {
		opt.Sentinel.MasterSet = cfg.SentinelMaster
		opt.Sentinel.Password = opt.Password
		opt.Sentinel.Username = opt.Username
		opt.Sentinel.TLSConfig = opt.TLSConfig
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	if cfg.PoolSize > 0 {
		opt.PipelineMultiplex = bits.Len(uint(cfg.PoolSize)) - 1
		opt.BlockingPoolSize = cfg.PoolSize
	}
	d := cfg.DialTimeout
	if d <= 0 {
		d = time.Second
	}
	opt.Dialer.Timeout = d
	opt.ConnWriteTimeout = d
	// Client-side caching is for reads; every call here is a script.
	opt.DisableCache = true
	// A decision is not idempotent: never retry one behind our back.
	opt.DisableRetry = true
	return opt, nil
}
