package transport_test

import (
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// TestConformance runs the transport contract's suite on the in-memory
// transport.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
		ts := transport.AsTransports(transport.NewInMemoryLimit(cfg.Size, cfg.UnexpectedLimit))
		t.Cleanup(func() {
			for _, tr := range ts {
				tr.Close()
			}
		})
		return ts
	})
}
