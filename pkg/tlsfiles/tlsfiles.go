// Package tlsfiles serves TLS from certificate files that may change: a
// key pair, and a CA bundle of the peers to trust, read at Load and read
// again on the next handshake after either changes on disk (a renewal by
// cert-manager, the kubelet's swap of a mounted Secret's "..data"
// symlink). A change is noticed by the files' stat (size, modification
// time, inode, symlinks followed) at each handshake, which costs two or
// three stat calls and no goroutine: tokengate's clients (Envoy, a
// management server) keep long-lived connections. A pair that does not
// load (a renewal half written: the certificate new, the key old) keeps
// the last good one serving and is tried again on the next handshake; the
// failure is logged once, not per handshake.
//
// Files is safe for concurrent use.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// Files are a key pair (either may be empty, then there is none) and a CA
// bundle (empty: none), kept in step with their files.
type Files struct {
	cert, key, ca string
	log           *slog.Logger

	mu        sync.Mutex
	pairStamp string
	caStamp   string
	pair      *tls.Certificate
	pool      *x509.CertPool
	failed    string // the failure last logged; "" once the files load
}

// Load reads the files now; an error names the file that did not load.
// A certificate needs its key and the reverse. log hears of reloads and
// of files that fail to load later; nil discards.
func Load(certFile, keyFile, caFile string, log *slog.Logger) (*Files, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("tls: a certificate file needs its key file (certificate %q, key %q)", certFile, keyFile)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Files{cert: certFile, key: keyFile, ca: caFile, log: log}
	if err := f.refresh(); err != nil {
		return nil, err
	}
	return f, nil
}

// Certificate is the key pair serving; nil when there is none.
func (f *Files) Certificate() *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLogged()
	return f.pair
}

// Pool is the CA bundle; nil when there is none.
func (f *Files) Pool() *x509.CertPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLogged()
	return f.pool
}

// ServerConfig is a server's TLS configuration: the pair as its
// certificate, the CA bundle to verify clients' certificates, which are
// required when requireClient, else verified when given.
func (f *Files) ServerConfig(requireClient bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.refreshLogged()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, ClientCAs: f.pool}
			if f.pair != nil {
				c.Certificates = []tls.Certificate{*f.pair}
			}
			switch {
			case requireClient:
				c.ClientAuth = tls.RequireAndVerifyClientCert
			case f.pool != nil:
				c.ClientAuth = tls.VerifyClientCertIfGiven
			}
			return c, nil
		},
	}
}

// ClientConfig is a client's TLS configuration: the CA bundle (none: the
// system's roots) to verify the server, serverName to expect in its
// certificate (empty: the host dialled), the pair as the client's
// certificate for mTLS. The CA bundle is the one read at Load.
func (f *Files) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		RootCAs:    f.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := f.Certificate(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}

// refreshLogged is refresh, logging a failure (the last good files keep
// serving) once: the files are read again on every handshake, and a client
// chooses how many it makes, so the same failure again is not a line; a
// different one is, and so is the first after the files loaded. f.mu is
// held.
func (f *Files) refreshLogged() {
	err := f.refresh()
	switch {
	case err == nil:
		f.failed = ""
	case err.Error() != f.failed:
		f.failed = err.Error()
		f.log.Error("TLS files did not load; the last good ones keep serving", "err", err)
	}
}

// refresh reads again whatever changed since it was last read. f.mu is
// held (or f is not shared yet).
func (f *Files) refresh() error {
	var errs []error
	if f.cert != "" {
		stamp := stamp(f.cert) + stamp(f.key)
		if stamp != f.pairStamp {
			pair, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				errs = append(errs, fmt.Errorf("tls: key pair %s, %s: %w", f.cert, f.key, err))
			} else {
				if f.pair != nil {
					f.log.Info("TLS certificate reloaded", "cert_file", f.cert)
				}
				f.pair, f.pairStamp = &pair, stamp
			}
		}
	}
	if f.ca != "" {
		stamp := stamp(f.ca)
		if stamp != f.caStamp {
			pool, err := readPool(f.ca)
			if err != nil {
				errs = append(errs, err)
			} else {
				if f.pool != nil {
					f.log.Info("TLS CA bundle reloaded", "ca_file", f.ca)
				}
				f.pool, f.caStamp = pool, stamp
			}
		}
	}
	return errors.Join(errs...)
}

func readPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// stamp identifies a file's content as far as its stat tells: a file
// that cannot be stat'ed has a stamp that never matches a good one.
func stamp(file string) string {
	fi, err := os.Stat(file)
	if err != nil {
		return "error"
	}
	s := fmt.Sprintf("%d/%s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s += fmt.Sprintf("/%d:%d", st.Dev, st.Ino)
	}
	return s + ";"
}
