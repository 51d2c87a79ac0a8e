package sparcml

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// survivorsGoOn: every rank runs allreduces until the victim dies (its
// transport aborted, as a killed process's connections break) at a
// random point; each survivor's error must name the victim, and the
// survivors shrink and run 100 collectives checked against the sum
// over the survivors.
func survivorsGoOn(t *testing.T, comms []*Comm, victim, dieAt int) {
	p := len(comms)
	var survivors []int
	for r := 0; r < p; r++ {
		if r != victim {
			survivors = append(survivors, r)
		}
	}
	errs := onEveryRank(t, comms, 60*time.Second, func(ctx context.Context, c *Comm) error {
		var err error
		for k := 0; err == nil; k++ {
			if c.Rank() == victim && k == dieAt {
				c.Abort(errors.New("killed by the test"))
				return nil
			}
			v := seeded(k, c.Rank(), 1000)
			err = Allreduce(ctx, c, v, Sum)
		}
		if !errors.Is(err, ErrPeerLost) {
			return fmt.Errorf("rank %d: error does not say a peer was lost: %w", c.Rank(), err)
		}
		if got := c.FailedRanks(err); len(got) != 1 || got[0] != victim {
			return fmt.Errorf("rank %d: FailedRanks %v, want [%d], of %w", c.Rank(), got, victim, err)
		}
		s, err := c.Shrink(ctx, c.FailedRanks(err))
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Size() != p-1 || survivors[s.Rank()] != c.Rank() {
			return fmt.Errorf("rank %d: shrunk to rank %d of %d", c.Rank(), s.Rank(), s.Size())
		}
		return checkedCollectives(ctx, s, survivors, 100)
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestShrinkAfterLostRank(t *testing.T) {
	for _, p := range []int{4, 8} {
		for trial := 0; trial < 3; trial++ {
			victim, dieAt := rand.IntN(p), rand.IntN(5)
			t.Run(fmt.Sprintf("P=%d/victim=%d/at=%d", p, victim, dieAt), func(t *testing.T) {
				comms, err := Local(p, WithOnPeerLoss("revoke"), WithTimeout(20*time.Second))
				require.NoError(t, err)
				defer closeAll(comms)
				survivorsGoOn(t, comms, victim, dieAt)
			})
		}
	}
}

// Revoke on one rank ends an operation the others are blocked in (the
// revoking rank never joins it), on every rank, and the survivors of a
// shrink that excludes nobody run on at once.
func TestRevokeEndsBlockedOperations(t *testing.T) {
	comms, err := Local(4, WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer closeAll(comms)
	revokeScenario(t, comms)
}

// The same over TCP, where the revocation travels as a fail-op frame.
func TestRevokeOverTCP(t *testing.T) {
	revokeScenario(t, initJob(t, 4, WithTimeout(30*time.Second)))
}

// Over TCP in the per-peer model: a rank whose connections drop without
// a goodbye (Abort, as a killed process) is named by every survivor,
// which shrink and run 100 checked collectives on the same connections.
func TestShrinkAfterLostRankOverTCP(t *testing.T) {
	comms := initJob(t, 4, WithOnPeerLoss("revoke"), WithTimeout(20*time.Second))
	survivorsGoOn(t, comms, 1, 2)
}

func revokeScenario(t *testing.T, comms []*Comm) {
	all := []int{0, 1, 2, 3}
	errs := onEveryRank(t, comms, 40*time.Second, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 2 {
			time.Sleep(100 * time.Millisecond) // the others are blocked by now
			c.Revoke()
		} else {
			err := Allreduce(ctx, c, seeded(0, c.Rank(), 100), Sum)
			var re *RevokedError
			if !errors.As(err, &re) || re.Rank != 2 {
				return fmt.Errorf("rank %d: want revoked by rank 2, got %v", c.Rank(), err)
			}
			if f := c.FailedRanks(err); len(f) != 0 {
				return fmt.Errorf("rank %d: FailedRanks %v after a revoke with no loss", c.Rank(), f)
			}
		}
		if err := c.Barrier(ctx); !errors.Is(err, ErrRevoked) {
			return fmt.Errorf("rank %d: a later operation: want ErrRevoked, got %v", c.Rank(), err)
		}
		s, err := c.Shrink(ctx, nil)
		if err != nil {
			return err
		}
		defer s.Close()
		return checkedCollectives(ctx, s, all, 20)
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestShrinkDisagreementFailsEverySurvivor(t *testing.T) {
	const p = 4
	comms, err := Local(p, WithTimeout(10*time.Second))
	require.NoError(t, err)
	defer closeAll(comms)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		var exclude []int
		if c.Rank() == 0 {
			exclude = []int{3} // rank 3 itself and ranks 1, 2 exclude nobody
		}
		if c.Rank() == 3 {
			return nil // it is not excluded by most: it takes part below
		}
		_, err := c.Shrink(ctx, exclude)
		return err
	})
	for r := 0; r < 3; r++ {
		assert.Error(t, errs[r], "rank %d", r)
	}
}

func TestShrinkInvalid(t *testing.T) {
	comms, err := Local(2)
	require.NoError(t, err)
	defer closeAll(comms)
	_, err = comms[0].Shrink(context.Background(), []int{0})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = comms[0].Shrink(context.Background(), []int{5})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = Local(2, WithOnPeerLoss("ignore"))
	assert.ErrorIs(t, err, ErrInvalid)
}
