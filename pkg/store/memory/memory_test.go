package memory

import (
	"testing"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New(Options{}) })
}

func TestConformanceOneShardTinyCap(t *testing.T) {
	// One shard: every multi-bucket request locks the same shard.
	storetest.Run(t, func(t *testing.T) store.Store { return New(Options{Shards: 1}) })
}
