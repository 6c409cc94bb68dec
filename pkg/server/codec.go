package server

import (
	"context"
	"log/slog"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/logbudget"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/server/lenient"
	"github.com/tokengate/tokengate/pkg/server/rlswire"
)

// vtMarshaler is what go-control-plane's vtprotobuf-generated code adds to
// its messages: marshalling without reflection.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// codec is gRPC's proto codec with three changes.
//
// A RateLimitResponse, the answer to every ShouldRateLimit, is written by
// rlswire, by hand, and a RateLimitRequest decoded by it when it takes
// the request (it gives up, and the proto codec decodes, on anything but
// the fields the messages declare), in every build: it saves the
// reflection walk of both messages and most of the decode's allocations
// (BenchmarkDecodeRequest, BenchmarkMarshalResponse in rlswire).
//
// Other messages that have vtprotobuf marshalling (ext_authz's and
// RLQS's responses) are marshalled by it, into a pooled buffer, which
// saves the reflection walk too. go-control-plane compiles those
// marshallers only with the vtprotobuf build tag, which make and the
// Dockerfile set (TestVTMarshalBuilt checks it then); a plain go build
// marshals them with the proto codec, to the same bytes. Marshalling of
// any other message is the proto codec's.
//
// A RateLimitRequest or CheckRequest that proto.Unmarshal refuses is
// decoded again by lenient.Unmarshal, which keeps string fields as bytes:
// Envoy forwards header bytes as they came, and a request refused here for
// invalid UTF-8 would be an error that failure_mode_deny: false lets
// through, past every limit. The request is used only when the lenient
// decode succeeds and found invalid UTF-8; it is counted in
// tokengate_requests_invalid_utf8_total. Otherwise the proto codec's error
// stands, so malformed wire data is refused exactly as before. Other
// messages (health, reflection) are the proto codec's alone.
type codec struct {
	proto encoding.CodecV2
	// invalidRLS and invalidAuthz count the requests decoded leniently.
	invalidRLS, invalidAuthz prometheus.Counter
	log                      *slog.Logger
	clk                      clock.Clock
	lines                    *logbudget.Budget // of the debug line of a lenient decode
	gate                     *decodeGate       // bounds large messages decoding at once (decodegate.go)
}

// lenientLogPerSecond is the most debug lines a second about requests
// decoded leniently: a client can send as many as it likes.
const lenientLogPerSecond = 10

// newCodec returns the server's codec; invalidUTF8 is
// metrics.Metrics.InvalidUTF8, clk times the log's budget.
func newCodec(invalidUTF8 *prometheus.CounterVec, log *slog.Logger, clk clock.Clock, gate *decodeGate) codec {
	return codec{
		gate:         gate,
		proto:        encoding.GetCodecV2(protoenc.Name),
		invalidRLS:   invalidUTF8.WithLabelValues(metrics.FrontDoorRateLimit),
		invalidAuthz: invalidUTF8.WithLabelValues(metrics.FrontDoorExtAuthz),
		log:          log,
		clk:          clk,
		lines:        logbudget.New(lenientLogPerSecond, time.Second),
	}
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	pool := mem.DefaultBufferPool()
	if resp, ok := v.(*rlsv3.RateLimitResponse); ok {
		size := rlswire.ResponseSize(resp)
		buf := pool.Get(size)
		rlswire.MarshalResponse((*buf)[:size], resp)
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal is rlswire's for a RateLimitRequest it takes, else the proto
// codec's, then, for the two request types only and only when that fails,
// the lenient decoder's (see codec).
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if n := data.Len(); n > gateFrom {
		defer c.gate.enter(n)()
		if _, ok := v.(*rlsv3.RateLimitRequest); ok {
			buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
			err := checkShape(buf.ReadOnlyData())
			buf.Free()
			if err != nil {
				return err
			}
		}
	}
	if req, ok := v.(*rlsv3.RateLimitRequest); ok && decodeRequest(data, req) {
		return nil
	}
	err := c.proto.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var (
		msg     proto.Message
		counter prometheus.Counter
		method  string
	)
	switch req := v.(type) {
	case *rlsv3.RateLimitRequest:
		msg, counter, method = req, c.invalidRLS, metrics.FrontDoorRateLimit
	case *authv3.CheckRequest:
		msg, counter, method = req, c.invalidAuthz, metrics.FrontDoorExtAuthz
	default:
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	n, lerr := lenient.Unmarshal(buf.ReadOnlyData(), msg)
	if lerr != nil || n == 0 {
		return err
	}
	counter.Inc()
	if !c.log.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	if dropped, ok := c.lines.Take(c.clk.Now()); ok {
		c.log.LogAttrs(context.Background(), slog.LevelDebug, "request with invalid UTF-8 decoded as bytes",
			slog.String("method", method), slog.Int("strings", n), logbudget.Dropped(dropped))
	}
	return nil
}

func (codec) Name() string { return protoenc.Name }

// decodeRequest is rlswire.DecodeRequest of data, which it reads in
// place when it is one buffer (as gRPC's proto codec does).
func decodeRequest(data mem.BufferSlice, req *rlsv3.RateLimitRequest) bool {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return rlswire.DecodeRequest(buf.ReadOnlyData(), req)
}
