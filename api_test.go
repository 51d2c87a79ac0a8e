package sparcml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onEveryRank runs fn on each communicator of a local job with a deadline.
func onEveryRank(t *testing.T, comms []*Comm, timeout time.Duration, fn func(ctx context.Context, c *Comm) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *Comm) {
			defer wg.Done()
			errs[r] = fn(ctx, c)
		}(r, c)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("ranks hung")
	}
	return errs
}

func TestConcurrentMixedOperations(t *testing.T) {
	const p = 4
	comms, err := Local(p)
	require.NoError(t, err)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		r := c.Rank()
		big := make([]float32, 100_003)
		for i := range big {
			big[i] = float32(r + i%7)
		}
		small := []float64{float64(r)}
		bc := make([]float32, 17)
		if r == 2 {
			for i := range bc {
				bc[i] = float32(i)
			}
		}
		gathered := make([]float64, p)
		reqs := []*Request{
			StartAllreduce(ctx, c, big, Sum),
			StartAllreduce(ctx, c, small, Max),
			StartBroadcast(ctx, c, bc, 2),
			StartAllgather(ctx, c, []float64{float64(10 * r)}, gathered),
			c.StartBarrier(ctx),
		}
		// Complete in reverse order.
		for i := len(reqs) - 1; i >= 0; i-- {
			if err := reqs[i].Wait(ctx); err != nil {
				return err
			}
		}
		for i, v := range big {
			want := float32(p*(i%7) + p*(p-1)/2)
			if v != want {
				return errors.New("big allreduce wrong")
			}
		}
		if small[0] != p-1 {
			return errors.New("max allreduce wrong")
		}
		for i, v := range bc {
			if v != float32(i) {
				return errors.New("broadcast wrong")
			}
		}
		for q, v := range gathered {
			if v != float64(10*q) {
				return errors.New("allgather wrong")
			}
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestCancelFailsOnAllRanks(t *testing.T) {
	comms, err := Local(3)
	require.NoError(t, err)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		opCtx := ctx
		if c.Rank() == 1 {
			// Rank 1 gives up at once; the others must be told.
			var cancel context.CancelFunc
			opCtx, cancel = context.WithCancel(ctx)
			cancel()
		}
		if c.Rank() == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		return Allreduce(opCtx, c, make([]float32, 1000), Sum)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var e *Error
		assert.True(t, errors.As(err, &e), "rank %d: %v", r, err)
	}
	// The communicator remains usable after a failed operation.
	errs = onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		v := []float64{1}
		if err := Allreduce(ctx, c, v, Sum); err != nil {
			return err
		}
		if v[0] != 3 {
			return errors.New("wrong sum after cancellation")
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestAbortNamesRank(t *testing.T) {
	comms, err := Local(4)
	require.NoError(t, err)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 3 {
			time.Sleep(20 * time.Millisecond)
			c.Abort(errors.New("test abort"))
			return nil
		}
		return Allreduce(ctx, c, make([]float32, 1<<16), Sum)
	})
	for r := 0; r < 3; r++ {
		require.Error(t, errs[r])
		assert.ErrorIs(t, errs[r], ErrPeerLost, "rank %d: %v", r, errs[r])
		assert.Contains(t, errs[r].Error(), "rank 3")
	}
}

func TestClosedAndNil(t *testing.T) {
	comms, _ := Local(1)
	c := comms[0]
	require.NoError(t, Allreduce(context.Background(), c, []float32{1}, Sum))
	c.Close()
	assert.ErrorIs(t, Allreduce(context.Background(), c, []float32{1}, Sum), ErrClosed)
	var nilComm *Comm
	assert.ErrorIs(t, Allreduce(context.Background(), nilComm, []float32{1}, Sum), ErrInvalid)
	_, err := Local(0)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestSendRecv(t *testing.T) {
	comms, _ := Local(3)
	errs := onEveryRank(t, comms, 10*time.Second, func(ctx context.Context, c *Comm) error {
		p, r := c.Size(), c.Rank()
		out := []float32{float32(r), float32(r * r)}
		in := make([]float32, 2)
		send := StartSend(ctx, c, out, (r+1)%p)
		if err := Recv(ctx, c, in, (r+p-1)%p); err != nil {
			return err
		}
		if err := send.Wait(ctx); err != nil {
			return err
		}
		q := (r + p - 1) % p
		if in[0] != float32(q) || in[1] != float32(q*q) {
			return errors.New("wrong payload")
		}
		return Send(ctx, c, out, r) // to self: invalid
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, ErrInvalid, "rank %d", r)
	}
}

// Ranks that start the same operations in a different order are told so,
// naming the kinds and the sequence number, instead of mixing data.
func TestStartOrderMismatchReported(t *testing.T) {
	comms, err := Local(3)
	require.NoError(t, err)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		sum := make([]float32, 64)
		bcast := make([]float32, 64)
		var first, second *Request
		if c.Rank() == 2 {
			first = StartBroadcast(ctx, c, bcast, 0)
			second = StartAllreduce(ctx, c, sum, Sum)
		} else {
			first = StartAllreduce(ctx, c, sum, Sum)
			second = StartBroadcast(ctx, c, bcast, 0)
		}
		return errors.Join(first.Wait(ctx), second.Wait(ctx))
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.True(t, errors.Is(err, ErrMismatch) || errors.Is(err, ErrAborted), "rank %d: %v", r, err)
		assert.Contains(t, err.Error(), "seq 1", "rank %d: %v", r, err)
		// Each operation's error, relayed or not, says where it
		// failed once.
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			assert.ErrorIs(t, e, ErrMismatch, "rank %d", r)
			assert.Equal(t, 1, strings.Count(e.Error(), "sparcml: rank"), "rank %d: %v", r, e)
		}
	}
	// The message names both operations somewhere in the job.
	all := errors.Join(errs...).Error()
	assert.Contains(t, all, "allreduce")
	assert.Contains(t, all, "broadcast")
}

// Quantized allreduce through the public API: integer inputs are exact in
// fp16, and q8 stays within one quantization step per rounding.
func TestAllreduceWithQuant(t *testing.T) {
	comms, err := Local(4)
	require.NoError(t, err)
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		for _, q := range []Quant{QuantFP16, QuantBF16, QuantQ8} {
			data := make([]float32, 5000)
			for i := range data {
				data[i] = float32((i+c.Rank())%7 - 3)
			}
			if err := Allreduce(ctx, c, data, Sum, WithQuant(q)); err != nil {
				return err
			}
			tol := 0.0
			if q == QuantQ8 {
				tol = 8 * 4 * 3.0 / 127 // (4 contributions + result) steps of scale <= 3*4 / 127
			}
			for i, v := range data {
				want := 0.0
				for r := 0; r < 4; r++ {
					want += float64((i+r)%7 - 3)
				}
				if d := float64(v) - want; d > tol || d < -tol {
					return fmt.Errorf("%v: element %d = %v, want %v", q, i, v, want)
				}
			}
		}
		return Allreduce(ctx, c, []float32{1}, Max, WithQuant(QuantQ4)) // sum only
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, ErrInvalid, "rank %d", r)
	}
}

// Point-to-point requests complete without a goroutine of their own: their
// Done channel closes when the transport completes them, out of order if
// the caller watches them out of order, a deadline fails a receive that
// nobody waits on, and a wrong length is reported by Test.
func TestP2PRequestsCompleteWithoutWaiting(t *testing.T) {
	comms, err := Local(2)
	require.NoError(t, err)
	const msgs = 8
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 1 {
			sends := make([]*Request, msgs)
			for i := range sends {
				sends[i] = StartSend(ctx, c, []float64{float64(i), float64(i * i)}, 0)
			}
			for _, s := range sends {
				if err := s.Wait(ctx); err != nil {
					return err
				}
			}
			// One value too many: the receiver reports the mismatch; this
			// side may or may not hear of it before its send completes.
			if err := Send(ctx, c, []float32{1, 2, 3}, 0); err != nil && !errors.Is(err, ErrMismatch) {
				return err
			}
			return nil
		}
		bufs := make([][]float64, msgs)
		recvs := make([]*Request, msgs)
		for i := range recvs {
			bufs[i] = make([]float64, 2)
			recvs[i] = StartRecv(ctx, c, bufs[i], 1)
		}
		for i := msgs - 1; i >= 0; i-- {
			select {
			case <-recvs[i].Done():
			case <-ctx.Done():
				return fmt.Errorf("receive %d never completed", i)
			}
			if done, err := recvs[i].Test(); !done || err != nil {
				return fmt.Errorf("receive %d: done %v, %v", i, done, err)
			}
			if bufs[i][0] != float64(i) || bufs[i][1] != float64(i*i) {
				return fmt.Errorf("receive %d: got %v", i, bufs[i])
			}
		}
		short := StartRecv(ctx, c, make([]float32, 2), 1)
		select {
		case <-short.Done():
		case <-ctx.Done():
			return errors.New("short receive never completed")
		}
		if _, err := short.Test(); !errors.Is(err, ErrMismatch) {
			return fmt.Errorf("short receive: %v, want ErrMismatch", err)
		}
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		never := StartRecv(tctx, c, make([]float32, 1), 1)
		select {
		case <-never.Done():
		case <-ctx.Done():
			return errors.New("a receive past its deadline never completed")
		}
		if _, err := never.Test(); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("receive past its deadline: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

// WaitAll completes a window of receives and reports the failures among
// them, in order, skipping nil requests.
func TestWaitAll(t *testing.T) {
	comms, err := Local(2)
	require.NoError(t, err)
	const msgs = 6
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 1 {
			sends := make([]*Request, msgs+1)
			for i := range msgs {
				sends[i] = StartSend(ctx, c, []float32{float32(i), float32(i * i)}, 0)
			}
			// The last message is one value too long for its receive.
			if err := Send(ctx, c, []float32{1, 2, 3}, 0); err != nil && !errors.Is(err, ErrMismatch) {
				return err
			}
			return WaitAll(ctx, sends...)
		}
		bufs := make([][]float32, msgs)
		recvs := make([]*Request, 0, msgs+2)
		for i := range bufs {
			bufs[i] = make([]float32, 2)
			recvs = append(recvs, StartRecv(ctx, c, bufs[i], 1))
		}
		recvs = append(recvs, nil, StartRecv(ctx, c, make([]float32, 2), 1))
		err := WaitAll(ctx, recvs...)
		if !errors.Is(err, ErrMismatch) {
			return fmt.Errorf("WaitAll: %v, want the last receive's ErrMismatch", err)
		}
		for i, b := range bufs {
			if b[0] != float32(i) || b[1] != float32(i*i) {
				return fmt.Errorf("receive %d: got %v", i, b)
			}
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}
