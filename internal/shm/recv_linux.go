//go:build linux

package shm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// reader is the state of one ring's reader between polls: the frame it
// is in, where its payload goes, how much of it has come.
type reader struct {
	inFrame   bool
	hdr       wire.Header
	claimed   bool
	claim     transport.Claimed
	got       uint64
	held      bool   // the claim found no unexpected budget
	heldEpoch uint64 // matchEpoch when it did; retried once it changes
	bye       bool   // the goodbye was read: nothing may follow
	body      [max(maxIovs*iovSize, wire.MaxReasonLen)]byte
}

// readRing handles what the peer has put in its ring, frame by frame,
// until the ring is empty, a frame's payload has not all come yet, or a
// message waits for the unexpected budget. Payloads are copied straight
// into posted receive buffers. Called with t.pollMu held.
func (t *Transport) readRing(p *peer, pulls *[]*pullJob) (worked bool, err error) {
	in, rd := &p.in, &p.rd
	avail, ok := in.waiting()
	if !ok {
		return false, wire.ProtocolErrorf("rank %d's ring head is %d bytes ahead of this rank's reading, beyond the ring's %d", p.rank, avail, in.size)
	}
	defer func() {
		if in.release() {
			ring(p.remoteSeq, p.remoteAwake) // the writer waits for room
		}
	}()
	for {
		if !rd.inFrame {
			if avail < hdrSize {
				return worked, nil
			}
			h, err := decodeHeader(in.peek(hdrSize), t.cfg.MaxMessage, rndvSlots)
			if err != nil {
				return worked, err
			}
			if rd.bye {
				return worked, wire.ProtocolErrorf("%v frame after goodbye", h.Kind)
			}
			in.skip(hdrSize)
			avail -= hdrSize
			worked = true
			rd.inFrame, rd.hdr, rd.claimed, rd.got = true, h, false, 0
		}
		h := &rd.hdr
		if h.Kind == wire.Data {
			done, moved := t.readData(p, &avail)
			worked = worked || moved
			if !done {
				return worked, nil
			}
		} else {
			body := bodySize(h)
			if avail < padded(body) {
				return worked, nil
			}
			b := rd.body[:body]
			in.get(b)
			in.skip(padded(body) - body)
			avail -= padded(body)
			if err := t.handleControl(p, h, b, pulls); err != nil {
				return true, err
			}
			worked = true
		}
		rd.inFrame, rd.claim = false, transport.Claimed{}
	}
}

// readData moves what has come of a data frame's payload to where the
// matcher says, and reports whether the frame is complete and whether it
// moved anything.
func (t *Transport) readData(p *peer, avail *uint64) (done, moved bool) {
	in, rd, h := &p.in, &p.rd, &p.rd.hdr
	if !rd.claimed {
		epoch := t.matchEpoch.Load()
		if rd.held && rd.heldEpoch == epoch {
			return false, false
		}
		c, err := t.m.TryClaim(p.rank, h.Tag, h.Desc, int(h.Length))
		if errors.Is(err, transport.ErrNoBudget) {
			if !rd.held {
				rd.held = true
				t.held.Add(1)
			}
			rd.heldEpoch = epoch
			return false, false
		}
		if rd.held {
			rd.held = false
			t.held.Add(-1)
		}
		if err != nil {
			return false, false // the matcher failed: so has the transport
		}
		rd.claim, rd.claimed, moved = c, true, true
	}
	if k := min(*avail, h.Length-rd.got); k > 0 {
		if dst := rd.claim.Dst(); dst != nil {
			in.get(dst[rd.got : rd.got+k])
		} else {
			in.skip(k)
		}
		rd.got += k
		*avail -= k
		moved = true
	}
	pad := padded(h.Length) - h.Length
	if rd.got < h.Length && p.writerGone.Load() {
		if n, _ := in.waiting(); n == 0 {
			// The peer closed in the middle of the message.
			rd.claim.Fail(t.goneError(p))
			p.broken = true
			return false, moved
		}
	}
	if rd.got < h.Length || *avail < pad {
		return false, moved
	}
	in.skip(pad)
	*avail -= pad
	rd.claim.Finish()
	t.recvd.Add(h.Length)
	t.msgsRecvd.Add(1)
	return true, true
}

// handleControl acts on a frame whose body has been read.
func (t *Transport) handleControl(p *peer, h *wire.Header, body []byte, pulls *[]*pullJob) error {
	switch h.Kind {
	case wire.Rendezvous:
		bufs, err := decodeIovs(body, h)
		if err != nil {
			return err
		}
		t.announce(&rndvRecv{p: p, hdr: *h, bufs: bufs}, pulls)
	case wire.FailOp:
		f, err := transport.DecodeFailure(body, t.size)
		if err != nil {
			return fmt.Errorf("fail-op frame: %w", err)
		}
		t.failOp(h.Tag.Comm, h.Tag.Seq, f)
	case wire.Goodbye:
		p.rd.bye = true
		p.byeReceived.Store(true)
		suffix := ""
		if len(body) > 0 {
			suffix = ", after failing: " + string(body)
		}
		t.peerClosed(p, t.lostError(p.rank, "rank %d closed its transport%s", p.rank, suffix))
	}
	return nil
}

// rndvRecv is a single-copy message announced by its sender: the sender's
// slot and buffers.
type rndvRecv struct {
	p    *peer
	hdr  wire.Header
	bufs []remoteBuf
}

func (rr *rndvRecv) slotWord() *uint32 { return word32(rr.p.theirSlots, 4*int(rr.hdr.Slot)) }

// drop tells the sender its message was dropped (a failed operation, a
// mismatch), so that its send completes. A withdrawn offer stays so.
func (rr *rndvRecv) drop() {
	t := rr.p.t
	if !t.enterMapped() {
		return
	}
	defer t.exitMapped()
	g := rr.hdr.Gen
	if atomic.CompareAndSwapUint32(rr.slotWord(), slotWord(g, slotOffered), slotWord(g, slotDone)) {
		ring(rr.p.remoteSeq, rr.p.remoteAwake)
	}
}

// pullJob is a single-copy message with a destination, to be read.
type pullJob struct {
	rr *rndvRecv
	c  transport.Claimed
}

// announce handles a rendezvous frame: the message is read at once if its
// receive is posted (or dropped if the matcher says so); otherwise it is
// parked, costing no buffer, until the receive comes (Recv).
func (t *Transport) announce(rr *rndvRecv, pulls *[]*pullJob) {
	h := &rr.hdr
	t.mu.Lock()
	c, ok, err := t.m.ClaimPosted(rr.p.rank, h.Tag, h.Desc, int(h.Length))
	if err != nil {
		t.mu.Unlock()
		return // the transport failed
	}
	if !ok {
		k := mkey{rr.p.rank, h.Tag}
		t.parked[k] = rr
		op := opKey{h.Tag.Comm, h.Tag.Seq}
		t.parkedOps[op] = append(t.parkedOps[op], k)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	if c.Dst() == nil {
		rr.drop()
		return
	}
	*pulls = append(*pulls, &pullJob{rr, c})
}

// matchParkedLocked matches a receive just posted for k against the
// parked single-copy messages: its own is claimed and queued for a pull
// (reporting true), and the parked messages of its operation are checked
// against the kind the receive has just recorded for it (they would
// otherwise escape the matcher's per-operation check); mismatched ones are
// returned to be dropped. Called with t.mu held.
func (t *Transport) matchParkedLocked(k mkey) (pull bool, drops []*rndvRecv) {
	op := opKey{k.tag.Comm, k.tag.Seq}
	if rr, ok := t.parked[k]; ok {
		t.unparkLocked(k)
		c, ok, err := t.m.ClaimPosted(k.peer, k.tag, rr.hdr.Desc, int(rr.hdr.Length))
		switch {
		case err != nil || !ok:
		case c.Dst() == nil:
			drops = append(drops, rr)
		default:
			t.pulls = append(t.pulls, &pullJob{rr, c})
			t.pullsQueued.Store(true)
			pull = true
		}
	}
	for _, pk := range t.parkedOps[op] {
		if rr := t.parked[pk]; rr != nil && t.m.CheckKind(pk.peer, pk.tag, rr.hdr.Desc) {
			t.unparkLocked(pk)
			drops = append(drops, rr)
		}
	}
	return pull, drops
}

func (t *Transport) unparkLocked(k mkey) {
	delete(t.parked, k)
	op := opKey{k.tag.Comm, k.tag.Seq}
	list := t.parkedOps[op]
	for i, pk := range list {
		if pk == k {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.parkedOps, op)
	} else {
		t.parkedOps[op] = list
	}
}

// pull reads a single-copy message straight from its sender's buffers
// into its destination, then tells the sender (slotDone). The slot goes to
// slotPulling first, which fails if the sender withdrew the offer: the
// receive then fails naming it.
func (t *Transport) pull(j *pullJob) {
	rr, p := j.rr, j.rr.p
	if !t.enterFill() {
		return // the transport fails: the matcher fails the claimed receive
	}
	g := rr.hdr.Gen
	w := rr.slotWord()
	if !atomic.CompareAndSwapUint32(w, slotWord(g, slotOffered), slotWord(g, slotPulling)) {
		t.exitFill()
		t.failWithdrawn(p, j.c)
		return
	}
	err := pullFrom(p.pid, j.c.Dst(), rr.bufs)
	atomic.StoreUint32(w, slotWord(g, slotDone))
	ring(p.remoteSeq, p.remoteAwake)
	t.exitFill()
	if err != nil {
		perr := t.pullError(p, rr, err)
		j.c.Fail(perr)
		t.fail(perr, p)
		return
	}
	j.c.Finish()
	t.recvd.Add(rr.hdr.Length)
	t.msgsRecvd.Add(1)
}

// pullError names what a failed read from a peer's memory means: the
// peer is gone (ESRCH), or sent addresses it does not own (EFAULT), or the
// kernel refuses reads it allowed when the transport was set up.
func (t *Transport) pullError(p *peer, rr *rndvRecv, err error) error {
	what := fmt.Errorf("shm: reading a %d-byte message (%v) from rank %d's memory (pid %d): %w",
		rr.hdr.Length, rr.hdr.Tag, p.rank, p.pid, err)
	kind := transport.ErrProtocol
	if errors.Is(err, syscall.ESRCH) {
		kind = transport.ErrPeerLost
	}
	return &transport.PeerError{Peer: p.rank, Kind: kind, Err: what}
}

// goneError is why the peer's close failed what involved it.
func (t *Transport) goneError(p *peer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.gone != nil {
		return p.gone
	}
	return t.lostError(p.rank, "rank %d closed its transport", p.rank)
}

// lostError is the error naming a peer that is gone.
func (t *Transport) lostError(peer int, format string, args ...any) error {
	return &transport.PeerError{Peer: peer, Kind: transport.ErrPeerLost,
		Err: fmt.Errorf("shm: %s", fmt.Sprintf(format, args...))}
}
