package sparcml

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/apihook"
)

// The C ABI's hooks (internal/apihook): failing one rank's next operation
// on every rank, and reading a Compressor's residual.
func init() {
	apihook.Set((*Comm).failNext)
	apihook.Set(sparsifierOf[float32])
	apihook.Set(sparsifierOf[float64])
}

// failNext fails the next operation on every rank with err, without
// running it: it takes the sequence number the next collective started on
// c would get, so the other ranks' collective at that point of the start
// order fails at once with an error naming this rank and err, instead of
// waiting for its deadline. It is for callers that check a collective's
// arguments before reaching this API, such as a language binding given a
// null buffer or an unsupported element type on one rank only. It returns
// the error this rank reports: an *Error naming kind as the operation and
// wrapping err. The communicator stays usable.
func (c *Comm) failNext(kind string, err error) error {
	if uerr := c.usable(kind); uerr != nil {
		return uerr
	}
	if err == nil {
		err = fmt.Errorf("%w: failed by the caller", ErrInvalid)
	}
	op, release := c.nextOp(context.Background())
	defer release()
	if c.t.Err() == nil {
		c.t.FailOp(c.id, op.Seq, err)
	}
	return &Error{Rank: c.Rank(), Peer: -1, Op: kind, Seq: op.Seq, Err: err}
}

// sparsifierOf is z's local state: the residual, the velocity, the
// density of the next step.
func sparsifierOf[T Float](z *Compressor[T]) *compress.Sparsifier[T] { return z.sp }
