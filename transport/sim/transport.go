package sim

import (
	"errors"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Transport is one rank's end of a simulated network: a
// transport.Transport whose sends take virtual time. It may only be used
// from the goroutines the world runs (World.Run, Go).
type Transport struct {
	w    *World
	rank int
	m    *transport.Matcher

	stats  transport.Stats
	err    error
	closed bool
	caps   transport.Capabilities // Caps, made once (see transport.Capabilities)
}

var _ transport.Transport = (*Transport)(nil)

// work is Capabilities.Work: with ComputeModel the calling goroutine is
// charged bytes at the kernel's rate.
func (t *Transport) work(k transport.Kernel, bytes int) {
	w := t.w
	if w.compute.Mode != ComputeModel || w.cur == nil {
		return
	}
	perByte := w.compute.Gamma
	if k == transport.KernelMerge {
		perByte = w.compute.SparseGamma
	}
	w.charge(float64(bytes) * perByte)
}

func (t *Transport) Name() string { return "sim" }
func (t *Transport) Rank() int    { return t.rank }
func (t *Transport) Size() int    { return len(t.w.ranks) }

// Caps implements transport.Transport: the segment size is
// Config.SegmentBytes; Go, NewSignal and Work run on the world's
// scheduler and clock; the simulated network has no failure model beyond
// the contract (no Failed channel, FailLocal, FailOpLocal or Survive).
func (t *Transport) Caps() transport.Capabilities { return t.caps }

// goFn is Capabilities.Go: fn runs as a goroutine of this rank under the
// world's scheduler.
func (t *Transport) goFn(fn func()) *transport.Request { return t.w.spawn(t.rank, fn) }

// newSignal is Capabilities.NewSignal: a request of the world's scheduler.
func (t *Transport) newSignal() *transport.Request {
	return t.w.newRequest(-1, transport.Tag{}, false)
}

func (t *Transport) checkPeer(peer int) error {
	if peer < 0 || peer >= len(t.w.ranks) || peer == t.rank {
		return fmt.Errorf("%w: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, t.rank, peer, len(t.w.ranks))
	}
	return nil
}

// Send implements transport.Transport. The payload is not copied at the
// send: the sender may not touch its buffers before the send completes,
// so the message refers to them until its last byte has left the
// sender's first link, and is then copied once, straight into the posted
// receive when there is one (its header has reached the receiver's
// matcher, as a stream transport's does before the payload), else into
// an unexpected-message buffer. The receive completes when the last byte
// arrives. Nothing is held per message in flight beyond that one copy.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	w := t.w
	w.enter()
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	if err := t.Err(); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	w.charge(w.cfg.Overhead)
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	req := w.newRequest(peer, tag, true)
	t.stats.BytesSent += uint64(n)
	t.stats.MsgsSent++
	d := &delivery{src: t, dst: w.ranks[peer], tag: tag, desc: desc, bufs: bufs, n: n}
	m := &message{path: w.net.path(t.rank, peer), size: n, prevEnd: w.now}
	m.done = func() {
		d.claim()
		req.Complete(nil, nil)
	}
	m.deliver = func(at float64) { w.at(at+w.cfg.Overhead, d.arrive) }
	w.cross(m, 0, w.now)
	return req
}

// delivery is a message's payload on its way from src to dst.
type delivery struct {
	src, dst *Transport
	tag      transport.Tag
	desc     transport.Desc
	bufs     [][]byte // the sender's, until claim
	n        int
	claimed  bool
	lost     bool
	c        transport.Claimed
}

// claim copies the payload out of the sender's buffers to where the
// receiver's matcher puts it; a message whose sender or receiver has
// failed or closed by then is lost with it.
func (d *delivery) claim() {
	if d.claimed {
		return
	}
	d.claimed = true
	bufs := d.bufs
	d.bufs = nil
	if d.src.err != nil {
		d.lost = true
		return
	}
	c, err := d.dst.m.TryClaim(d.src.rank, d.tag, d.desc, d.n)
	if err != nil {
		d.lost = true
		return
	}
	if dst := c.Dst(); dst != nil {
		off := 0
		for _, b := range bufs {
			off += copy(dst[off:], b)
		}
	}
	d.c = c
}

// arrive completes the message at the receiver: its last byte is in.
func (d *delivery) arrive() {
	d.claim() // the send completed first unless the event order says otherwise
	if d.lost {
		return
	}
	d.dst.stats.BytesRecv += uint64(d.n)
	d.dst.stats.MsgsRecv++
	d.c.Finish()
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	t.w.enter()
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	r := t.m.Post(peer, tag, desc, buf)
	t.w.hook(r)
	return r
}

// FailOp implements transport.Transport; the peers learn at once, with
// the failure's code (transport.FailureOf), as over a real network.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {
	t.m.FailOp(comm, seq, err)
	remote := transport.FailureOf(t.rank, err)
	for _, p := range t.w.ranks {
		if p != t {
			p.m.FailOp(comm, seq, remote)
		}
	}
}

// Abort implements transport.Transport: the peers see this rank lost.
func (t *Transport) Abort(err error) {
	if t.err != nil {
		return
	}
	t.err = fmt.Errorf("%w: %w", transport.ErrAborted, err)
	t.m.Abort(t.err)
	lost := &transport.PeerError{Peer: t.rank, Kind: transport.ErrPeerLost, Err: t.err}
	for _, p := range t.w.ranks {
		if p != t {
			p.m.FailPeer(t.rank, lost)
		}
	}
}

// Err implements transport.Transport.
func (t *Transport) Err() error { return t.err }

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats { return t.stats }

// Close implements transport.Transport.
func (t *Transport) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	if t.err == nil {
		t.err = transport.ErrClosed
	}
	t.m.Abort(transport.ErrClosed)
	bye := &transport.PeerError{Peer: t.rank, Kind: transport.ErrPeerLost, Err: errors.New("closed its transport")}
	for _, p := range t.w.ranks {
		if p != t {
			p.m.FailPeer(t.rank, bye)
		}
	}
	return nil
}
