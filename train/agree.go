package train

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/sparcml/sparcml"
)

// RankError is the error every rank returns when one rank failed a step
// that all must pass (loading its shard, checking its labels): the
// failing rank and its message.
type RankError struct {
	Rank int
	Msg  string
	err  error // the cause, on the rank that failed
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d: %s", e.Rank, e.Msg) }

// Unwrap gives the cause on the rank that failed (nil on the others).
func (e *RankError) Unwrap() error { return e.err }

// maxAgreedMsg bounds the message carried to the other ranks.
const maxAgreedMsg = 4096

// Agree is a collective over every rank's outcome of a step: each passes
// its own error or nil, and all return nil when every rank passed, or
// all return a *RankError carrying the lowest failing rank's message.
// A rank whose shard is bad thereby stops every rank with its error,
// instead of leaving the others waiting in the next collective.
func Agree(ctx context.Context, comm *sparcml.Comm, err error) error {
	p := comm.Size()
	first := []float64{float64(p)}
	if err != nil {
		first[0] = float64(comm.Rank())
	}
	if aerr := sparcml.Allreduce(ctx, comm, first, sparcml.Min); aerr != nil {
		return errors.Join(err, aerr)
	}
	root := int(first[0])
	if root >= p {
		return nil
	}
	var msg []byte
	if comm.Rank() == root {
		msg = []byte(err.Error())
		if len(msg) > maxAgreedMsg {
			msg = append(msg[:maxAgreedMsg-3], "..."...)
		}
	}
	n := []float64{float64(len(msg))}
	if berr := sparcml.Broadcast(ctx, comm, n, root); berr != nil {
		return errors.Join(err, berr)
	}
	buf := make([]float32, int(n[0]))
	for i, c := range msg {
		buf[i] = float32(c)
	}
	if berr := sparcml.Broadcast(ctx, comm, buf, root); berr != nil {
		return errors.Join(err, berr)
	}
	text := make([]byte, len(buf))
	for i, v := range buf {
		text[i] = byte(v)
	}
	re := &RankError{Rank: root, Msg: string(text)}
	if comm.Rank() == root {
		re.err = err
	}
	return re
}

// allreduceSum sums xs over every rank.
func allreduceSum(ctx context.Context, comm *sparcml.Comm, xs ...float64) ([]float64, error) {
	if err := sparcml.Allreduce(ctx, comm, xs, sparcml.Sum); err != nil {
		return nil, err
	}
	return xs, nil
}

// allreduceMax takes the largest of xs over every rank; allreduceMin the
// smallest (as the largest of the negations, one collective).
func allreduceMax(ctx context.Context, comm *sparcml.Comm, xs ...float64) ([]float64, error) {
	if err := sparcml.Allreduce(ctx, comm, xs, sparcml.Max); err != nil {
		return nil, err
	}
	return xs, nil
}

func allreduceMin(ctx context.Context, comm *sparcml.Comm, x int) (int, error) {
	v := []float64{float64(x)}
	if x == math.MaxInt {
		v[0] = math.Inf(1)
	}
	if err := sparcml.Allreduce(ctx, comm, v, sparcml.Min); err != nil {
		return 0, err
	}
	return int(v[0]), nil
}
