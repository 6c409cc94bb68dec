package rlswire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/internal/wiretest"
)

// FuzzDecodeRequest: for any bytes, DecodeRequest gives up, leaving the
// request alone, or decodes what proto.Unmarshal decodes; it never panics.
func FuzzDecodeRequest(f *testing.F) {
	d := wiretest.Descriptor
	rls := wiretest.RateLimitRequest
	full, err := proto.Marshal(wiretest.FullRateLimitRequest())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []wire{
		nil,
		full,
		append(append(wire{}, full...), full...),
		benchRequest(8),
		rls("edge", 3, d("user_id", "alice", "path", "/x"), d(), d("k", "ü")),
		rls("edge", 0, wire{}.Msg(2, wire{}.Varint(1, 1)).Msg(2, wire{}.Msg(3, nil)).Msg(3, wire{}.Varint(1, 1<<40))),
		rls("edge", 0, d("k", "\xff")),
		rls("edge", 0, d("k", "v")).Varint(9, 1),
		full[:len(full)-3],
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) { agrees(t, b) })
}
