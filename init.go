package sparcml

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/flight"
	"github.com/sparcml/sparcml/internal/startup"
	"github.com/sparcml/sparcml/internal/version"
)

// Init joins the job this process belongs to: it reads rank, size,
// rendezvous address and token from the launcher's environment (see
// docs/CONFIGURATION.md) unless options give them, meets the other
// ranks through rank 0's store, and connects the transport. It returns
// when every rank is connected, or fails with an error that says what was
// missing or unreachable; an invalid value of any SPARCML_* variable is
// such an error, naming the variable.
//
// A process started without any launcher (no rank and size in its
// environment, and no SPARCML_ADDR) gets a one-rank communicator, as an
// MPI program started without mpirun does; an incomplete launcher
// environment, such as a rank without a size, is an error.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	started := time.Now()
	s, err := config.Load(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("sparcml: %w", err)
	}
	o := newOptions(opts)
	initTimeout := startup.InitTimeout(ctx, o.Options, s)
	if initTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, initTimeout)
		defer cancel()
	}
	job, err := startup.Join(ctx, o.Options, s, startup.Process{Getenv: os.Getenv, Environ: os.Environ()}, initTimeout, newLogger(o, s))
	if err != nil {
		return nil, err
	}
	c := newComm(job.T, job.Env.Timeout, job.Log)
	c.plans.Every = s.SparseAgreeEvery
	c.store = job.Store
	c.topo, c.sys.topo = job.Topo, job.Topo
	c.startDiag(s, job.Store)
	if err := c.setPeerLoss(o, s); err != nil {
		c.Close()
		return nil, err
	}
	if s.Calibrate {
		if err := c.calibrate(ctx); err != nil {
			if flight.LostElsewhere(err) {
				c.failBeforeClose(err) // the peers hear the cause from this rank's goodbye
			}
			c.Close()
			return nil, err
		}
	}
	startup.LogReady(job, s, c.model, version.String(), time.Since(started))
	return c, nil
}
