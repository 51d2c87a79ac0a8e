package sparcml

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// Point-to-point messages live in their own tag space (the top bit of the
// communicator id) and are numbered per peer, so they never take part in
// the lockstep numbering of collectives: ranks not involved need not call
// anything. Messages between two ranks match in the order they were
// started, as in MPI.
const p2pCommBit = 1 << 31

// Send sends data to peer, which must call Recv with the same length. It
// runs in the caller's goroutine (no hand-off).
func Send[T Float](ctx context.Context, c *Comm, data []T, peer int) error {
	return c.startP2P(ctx, "send", peer, true, postSend(data, peer), nil).Wait(context.Background())
}

// StartSend starts Send and returns at once; data must not change until
// the request completes. Wait for it or Test it until it reports
// completion: that is also what releases its deadline timer.
func StartSend[T Float](ctx context.Context, c *Comm, data []T, peer int) *Request {
	return c.startP2P(ctx, "send", peer, true, postSend(data, peer), nil)
}

func postSend[T Float](data []T, peer int) func(op *collectives.Op) *transport.Request {
	return func(op *collectives.Op) *transport.Request {
		op.Desc = p2pDesc[T](len(data))
		return op.Send(peer, 0, collectives.AsBytes(data))
	}
}

// Recv receives into buf the message peer sent with Send; the lengths must
// match. It runs in the caller's goroutine.
func Recv[T Float](ctx context.Context, c *Comm, buf []T, peer int) error {
	post, check := recvFns(buf, peer)
	return c.startP2P(ctx, "recv", peer, false, post, check).Wait(context.Background())
}

// StartRecv starts Recv and returns at once. buf holds the message once
// Wait or Test has reported the request complete (Done closing alone is
// not enough in the rare case where the transport delivered elsewhere and
// the copy is made by that first Wait or Test).
func StartRecv[T Float](ctx context.Context, c *Comm, buf []T, peer int) *Request {
	post, check := recvFns(buf, peer)
	return c.startP2P(ctx, "recv", peer, false, post, check)
}

func recvFns[T Float](buf []T, peer int) (post func(op *collectives.Op) *transport.Request, check func(op *collectives.Op, data []byte) error) {
	dst := collectives.AsBytes(buf)
	post = func(op *collectives.Op) *transport.Request {
		op.Desc = p2pDesc[T](len(buf))
		return op.Recv(peer, 0, dst)
	}
	check = func(op *collectives.Op, data []byte) error {
		if len(data) != len(dst) {
			return op.Fail(fmt.Errorf("%w: received %d bytes, expected %d", ErrInvalid, len(data), len(dst)))
		}
		if len(data) > 0 && &data[0] != &dst[0] {
			copy(dst, data)
		}
		return nil
	}
	return post, check
}

func p2pDesc[T Float](n int) transport.Desc {
	return transport.Desc{Kind: transport.OpP2P, DType: uint8(collectives.DTypeOf[T]()), Count: uint64(n)}
}

// startP2P posts a point-to-point transfer and returns a request that
// completes with the transport's own request: no goroutine of ours sits
// between the transport's completion and the waiter, which saves a
// wake-up per message. The operation's deadline holds without anyone
// waiting: if its context ends first, the transfer is failed on both
// ranks. check, if not nil, validates a received payload; it runs, with
// the error wrapping, when Wait or Test first sees the completion.
func (c *Comm) startP2P(ctx context.Context, kind string, peer int, send bool,
	post func(op *collectives.Op) *transport.Request, check func(op *collectives.Op, data []byte) error) *Request {
	op, release, err := c.p2pOp(ctx, kind, peer, send)
	if err != nil {
		return failedRequest(kind, err)
	}
	tr := post(op)
	stop := context.AfterFunc(op.Ctx, func() {
		if done, _ := tr.Test(); !done {
			op.Fail(fmt.Errorf("%w while waiting for %s", op.Ctx.Err(), tr))
		}
	})
	r := &Request{kind: kind, seq: op.Seq, tr: tr}
	r.finish = func() error {
		stop()
		defer release()
		data, err := op.WaitData(tr) // complete: returns at once
		if err != nil || check == nil {
			return err
		}
		return check(op, data)
	}
	return r
}

// p2pOp checks the peer, numbers the message in its direction and bounds
// ctx by the default timeout. The sequence number is taken here, in call
// order, so messages between two ranks match in the order they started.
func (c *Comm) p2pOp(ctx context.Context, kind string, peer int, send bool) (*collectives.Op, context.CancelFunc, error) {
	if err := c.usable(kind); err != nil {
		return nil, nil, err
	}
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return nil, nil, &Error{Rank: c.Rank(), Peer: peer, Op: kind, Err: fmt.Errorf("%w: peer %d must be another rank in [0,%d)", ErrInvalid, peer, c.Size())}
	}
	c.p2pMu.Lock()
	if c.p2pSeq == nil {
		c.p2pSeq = make(map[p2pKey]uint64)
	}
	k := p2pKey{peer, send}
	c.p2pSeq[k]++
	seq := c.p2pSeq[k]
	c.p2pMu.Unlock()
	ctx, release := c.bounded(ctx)
	return &collectives.Op{Ctx: ctx, T: c.t, Comm: c.id | p2pCommBit, Seq: seq, Pool: c.pool}, release, nil
}

type p2pKey struct {
	peer int
	send bool
}
