package sparcml

import (
	"fmt"

	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/startup"
)

// WithOnPeerLoss chooses what a lost rank does to the others, instead of
// SPARCML_ON_PEER_LOSS: "abort" (the default) fails every operation on
// every survivor and the communicator is done; "revoke" fails the
// operations of every communicator the lost rank belonged to, with an
// error naming it (Comm.FailedRanks), and keeps the connections among the
// survivors, so that they can Shrink and go on. "revoke" needs the TCP
// or the in-memory transport: under SPARCML_TRANSPORT=auto it picks TCP
// for every peer, shared memory within a host included.
func WithOnPeerLoss(mode string) Option {
	return func(o *options) { o.OnPeerLoss = mode }
}

// setPeerLoss switches the job's transport to the per-peer failure model
// when asked to.
func (c *Comm) setPeerLoss(o options, s *config.Settings) error {
	switch mode := startup.PeerLossMode(o.Options, s); mode {
	case "", "abort":
		return nil
	case "revoke":
	default:
		return fmt.Errorf("sparcml: %w: WithOnPeerLoss(%q): want abort or revoke", ErrInvalid, o.OnPeerLoss)
	}
	survive := c.t.Caps().Survive
	if survive == nil {
		return fmt.Errorf("sparcml: rank %d: %w: SPARCML_ON_PEER_LOSS=revoke needs the TCP or in-memory transport, not %s", c.Rank(), ErrInvalid, c.t.Name())
	}
	c.world.Survive(survive)
	return nil
}
