package rdma

import (
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// TestConformance runs the transport contract's suite on RDMA, every rank
// in this process (soft-RoCE in the test/vm guest); it skips without a
// device.
func TestConformance(t *testing.T) {
	needRDMA(t)
	s := transporttest.Suite{Timeout: testDeadline}
	s.New = func(t *testing.T, cfg transporttest.Config) []transport.Transport {
		ts := startRanks(t, cfg.Size, func(c *Config) { c.UnexpectedLimit = cfg.UnexpectedLimit })
		out := make([]transport.Transport, len(ts))
		for r, tr := range ts {
			out[r] = tr
		}
		return out
	}
	s.Run(t)
}
