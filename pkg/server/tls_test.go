package server

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/tokengate/tokengate/internal/tlstest"
	"github.com/tokengate/tokengate/pkg/tlsfiles"
)

// call makes one ShouldRateLimit on a new connection with creds and
// returns the serial number of the certificate the server showed.
func call(t *testing.T, addr string, creds credentials.TransportCredentials) (int64, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
	}, grpc.Peer(&p))
	if err != nil {
		return 0, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return 0, errors.New("not over TLS")
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64(), nil
}

func clientTLS(t *testing.T, ca string, pair *tlstest.Pair) credentials.TransportCredentials {
	t.Helper()
	c := &tls.Config{ServerName: "localhost"}
	f, err := tlsfiles.Load("", "", ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.RootCAs = f.Pool()
	if pair != nil {
		kp, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return credentials.NewTLS(c)
}

// TLS: plaintext is refused, TLS is served, and a rotated certificate is
// served to the next connection.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server")
	first := ca.Server(t, dir, "tokengate", "localhost")
	files, err := tlsfiles.Load(first.CertFile, first.KeyFile, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "domains: {}\n", nil)
	srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log, TLS: files.ServerConfig(false)})
	addr := srv.GRPCAddr().String()

	if _, err := call(t, addr, insecure.NewCredentials()); err == nil {
		t.Fatal("plaintext was served")
	}
	got, err := call(t, addr, clientTLS(t, ca.CAFile, nil))
	if err != nil || got != first.Serial.Int64() {
		t.Fatalf("over TLS: serial %d, %v; want %d", got, err, first.Serial)
	}
	second := ca.Server(t, dir, "tokengate", "localhost")
	got, err = call(t, addr, clientTLS(t, ca.CAFile, nil))
	if err != nil || got != second.Serial.Int64() {
		t.Fatalf("after rotation: serial %d, %v; want %d", got, err, second.Serial)
	}
}

// mTLS: a client certificate of the client CA is required; without one,
// or with one of another CA, the call is refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := tlstest.NewCA(t, "server"), tlstest.NewCA(t, "client"), tlstest.NewCA(t, "other")
	pair := serverCA.Server(t, dir, "tokengate", "localhost")
	files, err := tlsfiles.Load(pair.CertFile, pair.KeyFile, clientCA.CAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "domains: {}\n", nil)
	srv := serve(t, Options{RateLimit: s.doors.RateLimit(s.svc), Metrics: s.m, Gatherer: s.reg, Policy: s.policy, Logger: s.log, TLS: files.ServerConfig(true)})
	addr := srv.GRPCAddr().String()

	envoy, stranger := clientCA.Client(t, dir, "envoy"), otherCA.Client(t, dir, "stranger")
	if _, err := call(t, addr, clientTLS(t, serverCA.CAFile, &envoy)); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if _, err := call(t, addr, clientTLS(t, serverCA.CAFile, nil)); err == nil {
		t.Fatal("served without a client certificate")
	}
	if _, err := call(t, addr, clientTLS(t, serverCA.CAFile, &stranger)); err == nil {
		t.Fatal("served a client certificate of another CA")
	}
	if _, err := call(t, addr, insecure.NewCredentials()); err == nil {
		t.Fatal("plaintext was served")
	}
}
