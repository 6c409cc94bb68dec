package memory

import (
	"testing"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// sweep is the janitor, for the conformance suite's reservation model.
var sweep = storetest.Options{Sweep: func(s store.Store, now int64) { s.(*Store).Sweep(now) }}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New(Options{}) }, sweep)
}

func TestConformanceOneShardTinyCap(t *testing.T) {
	// One shard: every multi-bucket request locks the same shard.
	storetest.Run(t, func(t *testing.T) store.Store { return New(Options{Shards: 1}) }, sweep)
}
