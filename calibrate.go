package sparcml

import (
	"context"
	"errors"
	"fmt"

	"github.com/sparcml/sparcml/internal/startup"
	"github.com/sparcml/sparcml/transport"
)

// calibrate measures the cost model's parameters at start-up
// (startup.Calibrate) on the library's own communicator (c.sys), so the
// user's operations are numbered from 1. Init skips it when
// SPARCML_CALIBRATE=0.
func (c *Comm) calibrate(ctx context.Context) error {
	if c.Size() < 2 {
		return nil
	}
	sys := c.sys
	m, err := startup.Calibrate(ctx, startup.Link{
		Rank: c.Rank(), Size: c.Size(),
		Barrier:   sys.Barrier,
		Allgather: func(ctx context.Context, in, out []float64) error { return Allgather(ctx, sys, in, out) },
		Broadcast: func(ctx context.Context, data []float64, root int) error { return Broadcast(ctx, sys, data, root) },
		Send:      func(ctx context.Context, data []float32, peer int) error { return Send(ctx, sys, data, peer) },
		Recv:      func(ctx context.Context, buf []float32, peer int) error { return Recv(ctx, sys, buf, peer) },
		StartRecv: func(ctx context.Context, buf []float32, peer int) func(context.Context) error {
			return StartRecv(ctx, sys, buf, peer).Wait
		},
	}, c.topo)
	if err != nil {
		// Name the operation as the library's, so its sequence number
		// is not read as one of the user's: "rank 2: start-up
		// barrier seq 1 (peer 0): ...".
		var te *transport.Error
		if errors.As(err, &te) {
			te.Op = "start-up " + te.Op
			return err
		}
		return fmt.Errorf("sparcml: rank %d: start-up calibration: %w", c.Rank(), err)
	}
	c.model, sys.model = m, m
	return nil
}
