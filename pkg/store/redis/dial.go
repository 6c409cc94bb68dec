package redis

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"strings"
	"syscall"
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
	// TLS turns TLS on with the system's certificate authorities (CAFile
	// replaces them).
	TLS bool
	// CertFile and KeyFile, both or neither, are the PEM client
	// certificate and key that Redis's TLS asks for (mTLS); they turn TLS on.
	CertFile, KeyFile string
}

// ErrConfig marks the errors of Dial that no retry fixes, because the
// settings are wrong: a bad URL, address or CA file, TLS on against a
// plaintext port or off against a TLS one, a certificate that the CA file
// does not sign or that is for another host, a wrong password, or an
// address that is not the Cluster asked for. Test for it with errors.Is; the error's text names the
// setting and the file or address. Any other error of Dial is an outage
// (Redis down, unreachable or too slow) that a later Dial may get past.
var ErrConfig = errors.New("redis: configuration error")

// configError is an error of Dial that is ErrConfig.
type configError struct{ err error }

func (e configError) Error() string        { return e.err.Error() }
func (e configError) Unwrap() error        { return e.err }
func (e configError) Is(target error) bool { return target == ErrConfig }

func configErrorf(format string, args ...any) error {
	return configError{fmt.Errorf(format, args...)}
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
		return nil, configErrorf("redis: --redis-cluster is set but %v is not a Redis Cluster (mode %s)", opt.InitAddress, c.Mode())
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
		pool, err := readCA(cfg.CAFile)
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
			return opt, errors.New("redis: --redis-cert-file and --redis-key-file go together")
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return opt, fmt.Errorf("redis: --redis-cert-file %s, --redis-key-file %s: %w", cfg.CertFile, cfg.KeyFile, err)
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

// readCA reads the PEM file of --redis-ca-file. Every CERTIFICATE block
// must parse (x509.CertPool.AppendCertsFromPEM would skip a bad one
// silently); other blocks are ignored, but a file of nothing else is
// refused, naming what it holds (a key given for the CA, say).
func readCA(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("redis: --redis-ca-file: %w", err)
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
			return nil, fmt.Errorf("redis: --redis-ca-file %s: certificate %d: %w", path, n, err)
		}
		pool.AddCert(cert)
	}
	switch {
	case n > 0:
		return pool, nil
	case len(others) > 0:
		return nil, fmt.Errorf("redis: --redis-ca-file %s: no PEM certificate in it, only %s", path, strings.Join(others, ", "))
	}
	return nil, fmt.Errorf("redis: --redis-ca-file %s: no PEM certificate in it", path)
}

// dial is rueidis's own dial (TCP, then TLS when tlsCfg is set, within
// the dialer's timeout) but for a failed TLS handshake, which it returns as
// a *handshakeError: the address accepted the connection, so the failure
// says something about what listens there.
func dial(ctx context.Context, addr string, d *net.Dialer, tlsCfg *tls.Config) (net.Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || tlsCfg == nil {
		return conn, err
	}
	if tlsCfg.ServerName == "" { // as tls.Dialer does: verify the host dialled
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tlsCfg = tlsCfg.Clone()
		tlsCfg.ServerName = host
	}
	tc := tls.Client(conn, tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, &handshakeError{addr: addr, err: err}
	}
	return tc, nil
}

// handshakeError is a TLS handshake with addr that failed after the TCP
// connection was made.
type handshakeError struct {
	addr string
	err  error
}

func (e *handshakeError) Error() string { return "TLS handshake with " + e.addr + ": " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// explain returns err of a failed connect as an ErrConfig when it shows a
// misconfiguration, and as an outage otherwise. Definite at once: a wrong
// password; a TLS alert from Redis (it wants a client certificate, say); a
// TLS handshake answered by something else than TLS; a certificate of an
// unknown CA or another host. A port that accepted the connection and then
// failed it is probed once more: TLS off and cut short, it may be a TLS
// port (a TLS handshake completes); TLS on and cut short, a refusal whose
// alert was lost to a reset (a handshake that then sends nothing reads
// it); a TLS handshake that hung or was cut short, a plaintext port (it
// answers PING). Anything else is an outage. A refused or timed-out TCP
// connection is never probed: that is Redis down, and the start is not
// delayed.
func (cfg Config) explain(opt rueidis.ClientOption, err error) error {
	wrapped := fmt.Errorf("redis: connect to %v: %w", opt.InitAddress, err)
	var (
		hs     *handshakeError
		header tls.RecordHeaderError
		verify *tls.CertificateVerificationError
	)
	handshake := errors.As(err, &hs)
	addrs := peers(err, opt.InitAddress)
	if handshake {
		addrs = []string{hs.addr}
	}
	switch {
	case isAuthError(err):
		return configError{wrapped}
	case opt.TLSConfig != nil && isTLSAlert(err):
		return tlsRefused(strings.Join(addrs, ","), err)
	case handshake && errors.As(err, &header):
		return cfg.plaintextPort(hs.addr, err)
	case handshake && errors.As(err, &verify):
		return cfg.certificateError(hs.addr, verify)
	case !handshake && !cutShort(err):
		return wrapped
	}
	timeout := opt.Dialer.Timeout
	for _, addr := range addrs {
		if opt.TLSConfig == nil {
			if speaksTLS(addr, timeout) {
				return configErrorf("redis: %s speaks TLS but TLS is off: set --redis-ca-file to the PEM of the CA that signs its certificate, or use a rediss:// URL (%w)", addr, err)
			}
			continue
		}
		if cutShort(err) {
			if alert := tlsRefusal(addr, opt.TLSConfig, timeout); alert != nil {
				return tlsRefused(addr, alert)
			}
		}
		if handshake && answersPlaintext(addr, timeout) {
			return cfg.plaintextPort(addr, fmt.Errorf("it answers PING in plaintext; the TLS handshake: %w", hs.err))
		}
	}
	return wrapped
}

func tlsRefused(addr string, alert error) error {
	return configErrorf("redis: %s refused TLS (%w): if Redis wants a client certificate, set its tls-auth-clients to no or optional: tokengate sends none", addr, alert)
}

// isTLSAlert reports whether err is a TLS alert the server sent.
func isTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// isAuthError reports whether err is Redis refusing the credentials.
func isAuthError(err error) bool {
	msg := err.Error()
	for _, s := range []string{"WRONGPASS", "NOAUTH", "invalid password", "invalid username"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (cfg Config) plaintextPort(addr string, why error) error {
	on, flag := "--redis-ca-file", "--redis-addr"
	if cfg.URL != "" {
		flag = "--redis-url"
		if cfg.CAFile == "" {
			on = "the rediss:// URL"
		}
	}
	return configErrorf("redis: %s is a plaintext port but TLS is on (%s): point %s at Redis's TLS port (tls-port), or turn TLS off (%w)", addr, on, flag, why)
}

func (cfg Config) certificateError(addr string, err *tls.CertificateVerificationError) error {
	var unknownCA x509.UnknownAuthorityError
	var otherHost x509.HostnameError
	switch {
	case errors.As(err, &unknownCA) && cfg.CAFile != "":
		return configErrorf("redis: %s: its TLS certificate is not signed by a CA in --redis-ca-file %s (%w)", addr, cfg.CAFile, err)
	case errors.As(err, &unknownCA):
		return configErrorf("redis: %s: its TLS certificate is not signed by a CA the system trusts: set --redis-ca-file to the PEM of its CA (%w)", addr, err)
	case errors.As(err, &otherHost):
		return configErrorf("redis: %s: its TLS certificate is for another host (%w)", addr, err)
	}
	// Expired or not yet valid: renewed on the server, it is accepted
	// without a restart here.
	return fmt.Errorf("redis: %s: %w", addr, err)
}

// cutShort reports whether err is a connection closed or reset by the
// peer, as a TLS port does to a plaintext HELLO.
func cutShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// peers returns the address err names, or else every one of addrs.
func peers(err error, addrs []string) []string {
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return []string{op.Addr.String()}
	}
	return addrs
}

// speaksTLS reports whether a TLS handshake with addr completes or is
// refused with a TLS alert. It verifies nothing and sends no data: it only
// asks whether the port speaks TLS.
func speaksTLS(addr string, timeout time.Duration) bool {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe, see above
	if err == nil {
		conn.Close()
		return true
	}
	return isTLSAlert(err)
}

// tlsRefusal makes a TLS handshake with addr, sends nothing and reads. A
// server refusing the client (one without a certificate, under TLS 1.3)
// sends its alert then, and with nothing of ours unread it closes without
// the reset that can lose the alert when a command was sent. It returns
// the alert, or nil.
func tlsRefusal(addr string, cfg *tls.Config, timeout time.Duration) error {
	conn, err := dial(context.Background(), addr, &net.Dialer{Timeout: timeout}, cfg)
	if err != nil {
		if isTLSAlert(err) {
			return err
		}
		return nil
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(timeout))
	if _, err := conn.Read(make([]byte, 1)); isTLSAlert(err) {
		return err
	}
	return nil
}

// answersPlaintext reports whether addr answers a plaintext PING with a
// Redis reply (+PONG, or an error such as -NOAUTH).
func answersPlaintext(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReaderSize(conn, 512).ReadString('\n')
	return err == nil && len(line) > 2 && (line[0] == '+' || line[0] == '-') && strings.HasSuffix(line, "\r\n")
}
