// Command noop is the gRPC floor of the load benchmark: a
// ShouldRateLimit server with plain grpc-go defaults that answers OK
// without looking at the request. test/load/run.sh runs it beside
// tokengate, interleaved, so the ratio says what tokengate's decision path
// costs on top of gRPC itself.
package main

import (
	"context"
	"flag"
	"log"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
)

type noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (noop) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, noop{})
	reflection.Register(s) // for grpcurl and ghz, which read the method from reflection
	log.Printf("serving %s", lis.Addr())
	log.Fatal(s.Serve(lis))
}
