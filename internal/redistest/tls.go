package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSServer is a redis-server that also serves TLS, with a certificate for
// 127.0.0.1 signed by a CA of its own.
type TLSServer struct {
	*Server
	TLSPort int
	CAFile  string // PEM of the CA that signed the server's certificate
	// ClientCert and ClientKey are a client certificate the same CA
	// signed, for a server that asks for one (--tls-auth-clients yes).
	ClientCert, ClientKey string
}

// TLSAddr is the host:port of the TLS listener.
func (s *TLSServer) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.TLSPort) }

// StartTLS starts a redis-server with a TLS port beside its plain one (the
// plain one answers the readiness PING), with extra arguments; it is
// stopped when the test ends.
func StartTLS(t testing.TB, extra ...string) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key, clientCert, clientKey := writeCertificates(t, dir)
	s := &TLSServer{TLSPort: freePort(t, false), CAFile: ca, ClientCert: clientCert, ClientKey: clientKey}
	s.Server = Start(t, append([]string{"--tls-port", strconv.Itoa(s.TLSPort), "--tls-cert-file", cert,
		"--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"}, extra...)...)
	return s
}

// writeCertificates writes a CA, a server certificate for 127.0.0.1 and a
// client certificate, both signed by it, and returns the files: CA,
// server certificate, server key, client certificate, client key.
func writeCertificates(t testing.TB, dir string) (ca, cert, key, clientCert, clientKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// issue writes a certificate the CA signs from tmpl, and its key.
	issue := func(name string, tmpl *x509.Certificate) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.NotBefore, tmpl.NotAfter, tmpl.KeyUsage = now.Add(-time.Hour), now.Add(24*time.Hour), x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", keyDER)
	}
	cert, key = issue("server", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	clientCert, clientKey = issue("client", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "tokengate"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return write("ca.pem", "CERTIFICATE", caDER), cert, key, clientCert, clientKey
}
