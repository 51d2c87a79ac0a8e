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
	return StartSend(ctx, c, data, peer).Wait(context.Background())
}

// StartSend starts Send and returns at once; data must not change until
// the request completes. Wait for it or Test it until it reports
// completion: that is also what releases its deadline timer.
func StartSend[T Float](ctx context.Context, c *Comm, data []T, peer int) *Request {
	return c.startP2P(ctx, "send", peer, p2pDesc[T](len(data)), collectives.AsBytes(data), false)
}

// Recv receives into buf the message peer sent with Send; the lengths must
// match. It runs in the caller's goroutine.
func Recv[T Float](ctx context.Context, c *Comm, buf []T, peer int) error {
	return StartRecv(ctx, c, buf, peer).Wait(context.Background())
}

// StartRecv starts Recv and returns at once. buf holds the message once
// Wait or Test has reported the request complete (Done closing alone is
// not enough in the rare case where the transport delivered elsewhere and
// the copy is made by that first Wait or Test).
func StartRecv[T Float](ctx context.Context, c *Comm, buf []T, peer int) *Request {
	return c.startP2P(ctx, "recv", peer, p2pDesc[T](len(buf)), collectives.AsBytes(buf), true)
}

func p2pDesc[T Float](n int) transport.Desc {
	return transport.Desc{Kind: transport.OpP2P, DType: uint8(collectives.DTypeOf[T]()), Count: uint64(n)}
}

// p2pState is the part of a Request only point-to-point requests use. It
// lives in the Request so that a message costs one allocation here: on a
// small message the allocations and the cache lines they touch are a fair
// share of the time the library adds to a round trip (docs/DEFAULTS.md,
// "What the transport adds").
type p2pState struct {
	op      collectives.Op
	recv    bool
	buf     []byte             // a receive's destination
	bufs    [1][]byte          // a send's payload, as the transport takes it (no slice to allocate)
	stop    func() bool        // unregisters expire; nil when not registered
	release context.CancelFunc // of the operation's deadline context
}

// startP2P posts a point-to-point transfer and returns a request that
// completes with the transport's own request: no goroutine of ours sits
// between the transport's completion and the waiter, which saves a
// wake-up per message. The operation's deadline holds without anyone
// waiting: if its context ends first, the transfer is failed on both
// ranks. A receive's payload is checked when Wait or Test first sees the
// completion.
func (c *Comm) startP2P(ctx context.Context, kind string, peer int, desc transport.Desc, buf []byte, recv bool) *Request {
	r := &Request{kind: kind}
	p := &r.p2p
	if err := c.p2pOp(ctx, p, kind, peer, !recv); err != nil {
		return failedRequest(kind, err)
	}
	p.op.Desc, p.recv = desc, recv
	r.seq = p.op.Seq
	if recv {
		p.buf = buf
		r.tr = p.op.Recv(peer, 0, buf)
	} else {
		p.bufs[0] = buf
		r.tr = p.op.Send(peer, 0, p.bufs[:]...)
	}
	// A send the socket took at once is complete: nothing left to expire.
	if !r.tr.Completed() {
		p.stop = context.AfterFunc(p.op.Ctx, r.expire)
	}
	return r
}

// expire fails a transfer whose context ended before it completed.
func (r *Request) expire() {
	if done, _ := r.tr.Test(); !done {
		op := &r.p2p.op
		op.Fail(fmt.Errorf("%w while waiting for %s", op.Ctx.Err(), r.tr))
	}
}

// finishP2P computes the error of a completed point-to-point request.
func (r *Request) finishP2P() error {
	p := &r.p2p
	if p.stop != nil {
		p.stop()
	}
	defer p.release()
	data, err := p.op.WaitData(r.tr) // complete: returns at once
	if err != nil || !p.recv {
		return err
	}
	if len(data) != len(p.buf) {
		return p.op.Fail(fmt.Errorf("%w: received %d bytes, expected %d", ErrInvalid, len(data), len(p.buf)))
	}
	if len(data) > 0 && &data[0] != &p.buf[0] {
		copy(p.buf, data)
	}
	return nil
}

// p2pOp checks the peer, numbers the message in its direction, bounds ctx
// by the default timeout and fills in p's operation. The sequence number
// is taken here, in call order, so messages between two ranks match in
// the order they started.
func (c *Comm) p2pOp(ctx context.Context, p *p2pState, kind string, peer int, send bool) error {
	if err := c.usable(kind); err != nil {
		return err
	}
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return &Error{Rank: c.Rank(), Peer: peer, Op: kind, Err: fmt.Errorf("%w: peer %d must be another rank in [0,%d)", ErrInvalid, peer, c.Size())}
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
	p.op = collectives.Op{Ctx: ctx, T: c.t, Comm: c.id | p2pCommBit, Seq: seq, Pool: c.pool}
	p.release = release
	return nil
}

type p2pKey struct {
	peer int
	send bool
}
