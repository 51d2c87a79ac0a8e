//go:build linux

package shm

import (
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// TestConformance runs the transport contract's suite on shared memory,
// every rank in this process: with single-copy reads of large messages
// (the default), with every message through the rings (the path where
// the kernel refuses cross-process reads), and with rings smaller than
// the suite's messages, so that they stream through; with waiters that
// spin before they sleep, and (the default on a host with fewer CPUs than
// ranks) that sleep at once.
func TestConformance(t *testing.T) {
	for _, v := range []struct {
		name string
		mod  func(*Config)
	}{
		{"SingleCopy", nil},
		{"Spinning", func(c *Config) { c.Spin = DefaultSpin }},
		{"Sleeping", func(c *Config) { c.Spin = -1 }},
		{"Rings", func(c *Config) { c.NoSingleCopy = true }},
		{"SmallRings", func(c *Config) { c.NoSingleCopy = true; c.RingSize = minRingSize }},
	} {
		t.Run(v.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
				return asTransports(startJob(t, cfg.Size, nil, func(c *Config) {
					c.UnexpectedLimit = cfg.UnexpectedLimit
					if v.mod != nil {
						v.mod(c)
					}
				}))
			})
		})
	}
}
