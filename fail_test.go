package sparcml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rank fails its next operation while the others run an allreduce:
// they fail at once (well before the deadline the operation has), naming
// the rank and its reason, and the communicator still works afterwards.
func TestFailNextFailsTheOperationOnEveryRank(t *testing.T) {
	const p, bad = 3, 1
	comms, err := Local(p, WithTimeout(time.Minute))
	require.NoError(t, err)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	reason := fmt.Errorf("%w: buffer is NULL", ErrInvalid)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		data := make([]float32, 1000)
		if c.Rank() == bad {
			return c.failNext("allreduce", reason)
		}
		return Allreduce(ctx, c, data, Sum)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var e *Error
		require.True(t, errors.As(err, &e), "rank %d: %v", r, err)
		assert.Equal(t, r, e.Rank)
		assert.Equal(t, uint64(1), e.Seq, "rank %d", r)
		assert.Contains(t, err.Error(), "buffer is NULL", "rank %d", r)
		if r == bad {
			assert.ErrorIs(t, err, ErrInvalid)
		} else {
			assert.ErrorIs(t, err, ErrAborted, "rank %d", r)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
			// Classified by the code the failure carries, whichever
			// rank relayed it, naming the bad rank once.
			assert.ErrorIs(t, err, ErrInvalid, "rank %d", r)
			assert.NotErrorIs(t, err, ErrMismatch, "rank %d", r)
			assert.Equal(t, 1, strings.Count(err.Error(), fmt.Sprintf("failed by rank %d", bad)), "rank %d: %v", r, err)
		}
		assert.Equal(t, 1, strings.Count(err.Error(), "sparcml:"), "rank %d: one prefix: %v", r, err)
	}
	errs = onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		data := []float64{float64(c.Rank())}
		if err := Allreduce(ctx, c, data, Sum); err != nil {
			return err
		}
		if data[0] != p*(p-1)/2 {
			return fmt.Errorf("sum %v, want %v", data[0], p*(p-1)/2)
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestFailNextOnAClosedComm(t *testing.T) {
	comms, err := Local(2)
	require.NoError(t, err)
	for _, c := range comms {
		c.Close()
	}
	assert.ErrorIs(t, comms[0].failNext("allreduce", errors.New("x")), ErrClosed)
}
