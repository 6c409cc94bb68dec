package redisconn

// Telling a misconfiguration from an outage. A connect that fails says
// little by itself: a TLS port cut short by a plaintext HELLO looks like a
// reset, a plaintext port answering a ClientHello looks like a bad record.
// explain reads the error and, when it may be TLS on one side only, probes
// the address once more, so that Dial's error says what to change
// (ErrConfig) or that Redis is down.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

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
	var dns *net.DNSError
	switch {
	case isAuthError(err):
		return configErrorf("redis: %s refused the credentials: set the user name (%s) and password (%s) it expects (%w)",
			strings.Join(addrs, ","), cfg.name("Username"), cfg.name("Password"), err)
	case errors.As(err, &dns):
		// Not ErrConfig: the name may be created later (a Service, DNS
		// catching up), and then a retry gets through.
		return fmt.Errorf("redis: %s: cannot resolve %q: check %s (%w)", strings.Join(opt.InitAddress, ","), dns.Name, cfg.addrName(), err)
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
				return configErrorf("redis: %s speaks TLS but TLS is off: set %s to the PEM of the CA that signs its certificate, or use a rediss:// URL (%w)", addr, cfg.name("CAFile"), err)
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

// addrName is what errors call the setting that holds the address: the
// URL's when one is set.
func (cfg Config) addrName() string {
	if cfg.URL != "" {
		return cfg.name("URL")
	}
	return cfg.name("Addr")
}

func (cfg Config) plaintextPort(addr string, why error) error {
	on, field := cfg.name("CAFile"), cfg.addrName()
	if cfg.URL != "" && cfg.CAFile == "" {
		on = "the rediss:// URL"
	}
	return configErrorf("redis: %s is a plaintext port but TLS is on (%s): point %s at Redis's TLS port (tls-port), or turn TLS off (%w)", addr, on, field, why)
}

func (cfg Config) certificateError(addr string, err *tls.CertificateVerificationError) error {
	var unknownCA x509.UnknownAuthorityError
	var otherHost x509.HostnameError
	switch {
	case errors.As(err, &unknownCA) && cfg.CAFile != "":
		return configErrorf("redis: %s: its TLS certificate is not signed by a CA in %s %s (%w)", addr, cfg.name("CAFile"), cfg.CAFile, err)
	case errors.As(err, &unknownCA):
		return configErrorf("redis: %s: its TLS certificate is not signed by a CA the system trusts: set %s to the PEM of its CA (%w)", addr, cfg.name("CAFile"), err)
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
