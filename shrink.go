package sparcml

import (
	"context"
	"fmt"
	"slices"

	"github.com/sparcml/sparcml/internal/world"
)

// Shrink returns a new communicator of c's ranks minus exclude (ranks of
// c), renumbered in their order in c, as ncclCommShrink and ULFM's
// MPI_Comm_shrink do. It is collective over the survivors: each calls it
// with the same exclude set, typically c.FailedRanks of the error that
// ended an operation, and it fails on every survivor when they disagree
// (or, when the disagreement splits them apart, at the timeout). The new
// communicator is usable at once, whether c was revoked or not; it has
// an id of its own, so nothing left over from c's operations can reach
// it. A lost rank is survivable only under SPARCML_ON_PEER_LOSS=revoke
// (WithOnPeerLoss); under the default every connection fails with it.
func (c *Comm) Shrink(ctx context.Context, exclude []int) (*Comm, error) {
	if c == nil || c.closed.Load() {
		return nil, c.usable("shrink")
	}
	mask := make([]float64, 2*c.Size()) // excluded: 1; then the negation, for the minimum
	for _, r := range exclude {
		if r < 0 || r >= c.Size() {
			return nil, fmt.Errorf("sparcml: rank %d: shrink: %w: excluded rank %d out of range [0,%d)", c.Rank(), ErrInvalid, r, c.Size())
		}
		if r == c.Rank() {
			return nil, fmt.Errorf("sparcml: rank %d: shrink: %w: this rank is in its own exclude list", c.Rank(), ErrInvalid)
		}
		mask[r], mask[c.Size()+r] = 1, -1
	}
	var survivors []int
	for r := 0; r < c.Size(); r++ {
		if mask[r] == 0 {
			survivors = append(survivors, r)
		}
	}
	sub, err := c.derive(world.DeriveID(c.id, "shrink", c.rev.NextShrink(), 0), survivors)
	if err != nil {
		return nil, err
	}
	// Agree: the element-wise maximum of the masks and of their negation
	// gives each rank's largest and smallest vote.
	if err := Allreduce(ctx, sub.sys, mask, Max); err != nil {
		sub.Close()
		return nil, fmt.Errorf("sparcml: rank %d: shrink: agreeing on the excluded ranks: %w", c.Rank(), err)
	}
	var split []int
	for r := 0; r < c.Size(); r++ {
		if mask[r] != -mask[c.Size()+r] {
			split = append(split, r)
		}
	}
	if len(split) > 0 {
		sub.Close()
		return nil, fmt.Errorf("sparcml: rank %d: shrink: %w: the survivors disagree on excluding ranks %v (this rank excludes %v)",
			c.Rank(), ErrInvalid, split, slices.Sorted(slices.Values(exclude)))
	}
	return sub, nil
}
