package fallback

import (
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// TestConformance runs the transport contract's suite on TCP over
// loopback, every rank in this process, connected through an in-memory
// store.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
		j := startJob(t, cfg.Size, func(c *Config) { c.UnexpectedLimit = cfg.UnexpectedLimit })
		ts := make([]transport.Transport, len(j.ts))
		for r, tr := range j.ts {
			ts[r] = tr
		}
		return ts
	})
}
