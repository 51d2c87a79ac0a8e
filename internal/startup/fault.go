package startup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// statusTimeout bounds asking the store which ranks are missing, after
// Init's own deadline has passed.
const statusTimeout = time.Second

// LaunchFailure turns an Init error into one that names the cause of a
// broken launch. A failure the store saw (a wrong token, a size that
// disagrees, a duplicate rank) says so, the same on every rank. A timeout
// names the ranks that never reached the store; rank 0 then fails the
// launch with that, so the ranks still waiting hear it at once rather
// than at their own deadlines.
func LaunchFailure(ctx context.Context, err error, rank int, store bootstrap.Store, initTimeout time.Duration) error {
	var le *bootstrap.LaunchError
	if errors.As(err, &le) || errors.As(context.Cause(ctx), &le) {
		return fmt.Errorf("sparcml: rank %d: %w", rank, le)
	}
	if ctx.Err() == nil || store == nil {
		return err
	}
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		// The store went away under Init (OnLaunchFailure): rank 0 is
		// gone, which is the cause, whatever Init was waiting for.
		return causedBy(rank, cause, err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	missing, lost, serr := bootstrap.LaunchStatus(sctx, store)
	if serr != nil {
		if errors.As(serr, &le) {
			return fmt.Errorf("sparcml: rank %d: %w", rank, le)
		}
		return err
	}
	var failure bootstrap.LaunchError
	switch {
	case len(missing) > 0:
		failure = bootstrap.LaunchError{Code: transport.CodeTimeout,
			Cause: fmt.Sprintf("%s never reached the rendezvous store within %s", transport.RankList(missing), initTimeoutName(initTimeout))}
	case len(lost) > 0:
		// The ranks still up waited for what a dead one would never set.
		failure = bootstrap.LaunchError{Code: transport.CodePeerLost,
			Cause: fmt.Sprintf("%s left the rendezvous store during Init without a goodbye (killed or crashed?)", transport.RankList(lost))}
	default:
		return err
	}
	bootstrap.FailLaunch(store, failure.Code, failure.Cause)
	return causedBy(rank, &failure, err)
}

// FailInit ends an Init that failed with err after the store was
// reached (store nil for a one-rank job): it names the launch's cause
// (LaunchFailure), reports this rank's failure to the store, and closes
// the store. If the launch had already failed, the error names that first
// cause with err after it: a rank whose connection to a leaving rank
// broke must not look like the root cause.
func FailInit(ctx context.Context, err error, rank int, store bootstrap.Store, initTimeout time.Duration) error {
	err = LaunchFailure(ctx, err, rank, store, initTimeout)
	if store == nil {
		return err
	}
	defer store.Close()
	if le := bootstrap.ReportInitFailure(store, err); le != nil {
		return causedBy(rank, le, err)
	}
	return err
}

// causedBy is err as this rank reports it when cause is the launch's.
func causedBy(rank int, cause, err error) error {
	return fmt.Errorf("sparcml: rank %d: %w (%v)", rank, cause, err)
}

func initTimeoutName(d time.Duration) string {
	if d <= 0 {
		return "the context's deadline"
	}
	return fmt.Sprintf("SPARCML_INIT_TIMEOUT (%v)", d)
}
