package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// Barrier returns once every rank has entered it. It uses the
// dissemination algorithm: in round k rank r signals r+2^k and waits for
// r-2^k, so after ceil(log2 P) rounds every rank has heard, directly or
// not, from every other. Messages are empty; each round pairs different
// ranks, so all use step 0.
func Barrier(op *Op) error {
	if err := checkOp(op); err != nil {
		return err
	}
	op.Desc = transport.Desc{Kind: transport.OpBarrier, Algo: uint8(AlgoDirect)}
	return dissemination(op)
}

// dissemination runs the barrier's rounds with whatever descriptor op
// carries. Collectives of zero elements use it so that they still meet
// every rank's descriptor: a rank that passes an empty buffer where the
// others pass data gets a mismatch error instead of returning early.
func dissemination(op *Op) error {
	p, r := op.Size(), op.Rank()
	for dist := 1; dist < p; dist *= 2 {
		recv := op.Recv(mod(r-dist, p), 0, nil)
		send := op.Send(mod(r+dist, p), 0)
		if err := op.Wait(send, recv); err != nil {
			return err
		}
		if n := len(recv.Data()); n != 0 {
			return failSize(op, recv.Peer, n, 0)
		}
	}
	return nil
}
