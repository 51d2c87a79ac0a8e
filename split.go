package sparcml

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/sparseplan"
	"github.com/sparcml/sparcml/internal/world"
)

// Split partitions c into sub-communicators, as MPI_Comm_split and
// ncclCommSplit do. It is collective: every rank of c calls it, in the
// same place of c's start order. The ranks that pass the same color form
// one sub-communicator, ranked by key, then by their rank in c; a rank
// that passes a negative color joins none and gets a nil communicator
// (MPI_UNDEFINED). color and key must fit in 32 bits.
//
// A sub-communicator runs on c's connections with an id of its own, so
// its messages never mix with those of c or of any other communicator
// and its operations may run concurrently with theirs. It keeps c's
// timeout and cost model. Close it when done; that releases no
// connections (c owns them), and c's Close ends it too.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if err := c.usable("split"); err != nil {
		return nil, err
	}
	mine := []float64{float64(color), float64(key)}
	if color < math.MinInt32 || color > math.MaxInt32 || key < math.MinInt32 || key > math.MaxInt32 {
		// Still take part, so the other ranks fail at once too.
		mine[0] = math.NaN()
	}
	all := make([]float64, 2*c.Size())
	req := StartAllgather(ctx, c.sys, mine, all)
	if err := req.Wait(ctx); err != nil {
		return nil, fmt.Errorf("sparcml: rank %d: split: %w", c.Rank(), err)
	}
	for r := 0; r < c.Size(); r++ {
		if math.IsNaN(all[2*r]) {
			return nil, fmt.Errorf("sparcml: rank %d: split: %w: rank %d passed a color or key outside 32 bits", c.Rank(), ErrInvalid, r)
		}
	}
	if color < 0 {
		return nil, nil
	}
	var group []int // ranks of c with this color, in the new order
	for r := 0; r < c.Size(); r++ {
		if all[2*r] == float64(color) {
			group = append(group, r)
		}
	}
	slices.SortStableFunc(group, func(a, b int) int {
		if ka, kb := all[2*a+1], all[2*b+1]; ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return a - b
	})
	return c.derive(world.DeriveID(c.id, "split", req.Seq(), uint64(uint32(color))), group)
}

// derive makes the communicator of c's ranks group (in their new order),
// of which this rank is one, with id id.
func (c *Comm) derive(id uint32, group []int) (*Comm, error) {
	me := slices.Index(group, c.Rank())
	if me < 0 {
		return nil, fmt.Errorf("sparcml: rank %d: %w: not a member of the new communicator", c.Rank(), ErrInvalid)
	}
	members := make(world.Members, len(group))
	for i, r := range group {
		members[i] = c.members.JobRank(r)
	}
	t := world.NewSubTransport(c.world.Transport(), members, me)
	pool := &collectives.Buffers{}
	topo := c.topo.Sub(group)
	n := &Comm{t: t, id: id, timeout: c.timeout, pool: pool, model: c.model,
		log: c.log, world: c.world, members: members, topo: topo, plans: sparseplan.Plans{Every: c.plans.Every}}
	n.sys = &Comm{t: t, id: id | world.SysCommBit, timeout: c.timeout, pool: pool, model: c.model,
		log: c.log, world: c.world, members: members, topo: topo}
	if !c.world.Register(id, (*member)(n)) {
		return nil, fmt.Errorf("sparcml: rank %d: communicator id %d is in use on this rank (a hash collision): derive it again", c.Rank(), id)
	}
	n.watchRevoke()
	if err := c.world.LostMember(members); err != nil {
		n.revokeLocal(&RevokedError{Rank: -1, Cause: err})
	}
	return n, nil
}
