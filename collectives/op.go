package collectives

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sparcml/sparcml/transport"
)

// Op is one collective operation in progress: the transport it runs over,
// its tag (communicator and sequence number), the descriptor every message
// carries for mismatch detection, the context that bounds it and a pool of
// scratch buffers reused across calls. Topo, when set, is the hosts the
// ranks run on, for the algorithms that follow the hierarchy.
type Op struct {
	Ctx  context.Context
	T    transport.Transport
	Comm uint32
	Seq  uint64
	Desc transport.Desc
	Pool *Buffers
	Topo *Topology
}

// Rank and Size of the transport the op runs over.
func (o *Op) Rank() int { return o.T.Rank() }
func (o *Op) Size() int { return o.T.Size() }

// commRank is the communicator's number of rank r of the transport the op
// runs over: a hierarchical algorithm runs the flat ones on group views
// (group.go), whose ranks count from 0 within a host or across hosts, and
// errors must name the ranks the user knows.
func (o *Op) commRank(r int) int {
	t := o.T
	for r >= 0 {
		g, ok := t.(*group)
		if !ok {
			break
		}
		r, t = g.members[r], g.Transport
	}
	return r
}

func (o *Op) tag(step uint32) transport.Tag {
	return transport.Tag{Comm: o.Comm, Seq: o.Seq, Step: step}
}

// Send starts sending bufs (as one message) to peer at step.
func (o *Op) Send(peer int, step uint32, bufs ...[]byte) *transport.Request {
	return o.T.Send(peer, o.tag(step), o.Desc, bufs...)
}

// Recv starts receiving the message of step from peer, into buf if it fits.
func (o *Op) Recv(peer int, step uint32, buf []byte) *transport.Request {
	return o.T.Recv(peer, o.tag(step), o.Desc, buf)
}

// Wait waits for all reqs. On failure it fails the operation on every
// rank (unless the transport itself is gone) and returns an *transport.Error
// naming this rank, the operation, its sequence number and the peer. When
// the context ends first, the error lists the peers still waited for.
func (o *Op) Wait(reqs ...*transport.Request) error {
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(o.Ctx); err != nil {
			// A failure that arrived together with the deadline is the
			// better explanation: report it rather than the timeout.
			if done, rerr := r.Test(); done && rerr != nil {
				return o.failAt(r.Peer, r.Tag.Step, rerr)
			}
			return o.Fail(fmt.Errorf("%w while waiting for %s", err, pendingPeers(reqs)))
		}
	}
	return nil
}

// WaitData waits for one receive and returns its payload.
func (o *Op) WaitData(r *transport.Request) ([]byte, error) {
	if err := o.Wait(r); err != nil {
		return nil, err
	}
	return r.Data(), nil
}

// Fail fails the operation on every rank with err and returns it wrapped.
// Algorithms call it for errors they detect themselves (bad sizes from a
// peer, invalid input).
func (o *Op) Fail(err error) error {
	return o.failAt(-1, 0, err)
}

func (o *Op) failAt(peer int, step uint32, err error) error {
	var te *transport.Error
	if errors.As(err, &te) && te.Seq == o.Seq {
		return err // already wrapped for this op
	}
	err = describe(err)
	if !errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrRevoked) && o.T.Err() == nil {
		o.T.FailOp(o.Comm, o.Seq, err)
	}
	var pe *transport.PeerError
	if peer < 0 && errors.As(err, &pe) {
		peer = pe.Peer
	}
	return &transport.Error{Rank: o.commRank(o.Rank()), Peer: peer, Op: o.Desc.Kind.String(), Seq: o.Seq, Step: step, Err: err}
}

func pendingPeers(reqs []*transport.Request) string {
	var parts []string
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if done, _ := r.Test(); !done {
			parts = append(parts, r.String())
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Buffers is a small free list of scratch byte buffers, shared by the
// operations of one communicator so steady-state calls do not allocate.
type Buffers struct {
	mu   sync.Mutex
	free [][]byte
}

const maxFreeBuffers = 32

// Get returns a buffer of length n (contents undefined). A nil *Buffers
// allocates.
func (b *Buffers) Get(n int) []byte {
	if b == nil {
		return make([]byte, n)
	}
	b.mu.Lock()
	best := -1
	for i, f := range b.free {
		if cap(f) >= n && (best < 0 || cap(f) < cap(b.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		f := b.free[best]
		b.free[best] = b.free[len(b.free)-1]
		b.free = b.free[:len(b.free)-1]
		b.mu.Unlock()
		return f[:n]
	}
	b.mu.Unlock()
	// Round up to 8 bytes so the buffer can hold any element type.
	return make([]byte, n, (n+7)&^7)
}

// Put returns a buffer to the free list; the smallest is dropped when full.
func (b *Buffers) Put(buf []byte) {
	if b == nil || cap(buf) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.free) < maxFreeBuffers {
		b.free = append(b.free, buf[:0])
		return
	}
	small := 0
	for i, f := range b.free {
		if cap(f) < cap(b.free[small]) {
			small = i
		}
	}
	if cap(buf) > cap(b.free[small]) {
		b.free[small] = buf[:0]
	}
}
