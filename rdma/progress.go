package rdma

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// progress polls the completion queue until Close. While completions
// come it polls in batches; once idle it busy-polls for Config.Spin and
// then blocks on the completion channel, waking at least every KeepAlive
// to probe the peers.
func (t *Transport) progress() {
	defer close(t.done)
	wcs := make([]verbs.WorkCompletion, pollBatch)
	lastWork, lastKA := time.Now(), time.Now()
	for !t.stop.Load() {
		n, err := t.cq.Poll(wcs)
		if err != nil {
			t.fail(fmt.Errorf("rdma: %w", err))
			return
		}
		if n > 0 {
			t.handle(wcs[:n])
			lastWork = time.Now()
			continue
		}
		now := time.Now()
		if now.Sub(lastKA) >= t.cfg.KeepAlive {
			lastKA = now
			if t.Err() == nil {
				for _, p := range t.peers {
					if p != nil {
						p.postKeepAlive()
					}
				}
			}
		}
		if now.Sub(lastWork) < t.cfg.Spin {
			runtime.Gosched()
			continue
		}
		if err := t.block(wcs); err != nil {
			t.fail(fmt.Errorf("rdma: %w", err))
			return
		}
		lastWork = time.Now()
	}
}

// block arms the CQ, polls once more (a completion that arrived before
// arming raises no event) and then waits for the channel, parked in Go's
// poller, for at most KeepAlive.
func (t *Transport) block(wcs []verbs.WorkCompletion) error {
	if err := t.cq.ReqNotify(false); err != nil {
		return err
	}
	n, err := t.cq.Poll(wcs)
	if err != nil {
		return err
	}
	if n > 0 {
		t.handle(wcs[:n])
		return nil
	}
	if _, err := t.cq.WaitEvent(time.Now().Add(t.cfg.KeepAlive)); err != nil {
		return err
	}
	// Take any further events, so that they are acknowledged in batches.
	for {
		got, err := t.cq.GetEvent()
		if err != nil || !got {
			return err
		}
	}
}

func (t *Transport) handle(wcs []verbs.WorkCompletion) {
	for i := range wcs {
		wc := &wcs[i]
		kind, r, id := splitWRID(wc.ID)
		if r < 0 || r >= t.size || t.peers[r] == nil {
			continue // not ours; cannot happen
		}
		p := t.peers[r]
		if !p.touched {
			p.touched = true
			t.touched = append(t.touched, p)
		}
		if wc.Status != verbs.WCSuccess {
			t.completionError(p, kind, wc)
			if kind == wrEager && id == 1 {
				t.byeDone()
			}
			continue
		}
		switch kind {
		case wrRecv:
			p.recvToPost++
			t.onRecv(p, wc)
		case wrEager:
			p.completed(1, false)
			if id == 1 {
				t.byeDone()
			}
		case wrCredit:
			p.completed(1, false)
		case wrKeepalive:
			p.completed(1, true)
		case wrRndv:
			t.onRndvDone(p, id)
		}
	}
	// Receives are reposted and queues drained once per batch.
	for _, p := range t.touched {
		p.touched = false
		if t.Err() == nil {
			if err := p.postRecvs(); err != nil {
				t.peerLost(p.rank, err)
			}
		}
		p.drain()
	}
	t.touched = t.touched[:0]
}

func (t *Transport) completionError(p *peer, kind uint8, wc *verbs.WorkCompletion) {
	if t.Err() != nil {
		return // flushes after the transport failed
	}
	what := [...]string{"?", "receive", "eager send", "rendezvous write", "credit return", "keep-alive"}[min(int(kind), 5)]
	err := fmt.Errorf("%s to rank %d failed on %s qp %#x: %v (status %d, vendor error %#x)",
		what, p.rank, t.ep.ctx.Name(), wc.QPNum, wc.Status, uint32(wc.Status), wc.Vendor)
	if wc.Status == verbs.WCRetryExcErr {
		err = fmt.Errorf("%w: the peer died, or cannot be reached (check the GID index and the network)", err)
	}
	t.peerLost(p.rank, err)
}

func (t *Transport) onRecv(p *peer, wc *verbs.WorkCompletion) {
	if !wc.HasImm {
		t.protocolError(p.rank, errors.New("rdma: message without immediate"))
		return
	}
	kind, val := splitImm(wc.Imm)
	switch kind {
	case immEager:
		if int(val) >= p.slots {
			t.protocolError(p.rank, fmt.Errorf("rdma: eager write to slot %d of %d", val, p.slots))
			return
		}
		t.onEager(p, int(val))
	case immDone:
		t.onDone(p, val)
	case immCredit:
		p.mu.Lock()
		p.credits += int(val)
		p.mu.Unlock()
	default:
		t.protocolError(p.rank, fmt.Errorf("rdma: unknown immediate %#x", wc.Imm))
	}
}

// onEager handles the message in a ring slot, then frees the slot.
func (t *Transport) onEager(p *peer, slot int) {
	b := p.ring(slot)
	var h header
	if err := h.decode(b); err != nil {
		t.protocolError(p.rank, err)
		return
	}
	if int(h.Len) > len(b)-hdrSize {
		t.protocolError(p.rank, fmt.Errorf("%w: eager message of %d bytes in a %d-byte slot",
			transport.ErrProtocol, h.Len, len(b)))
		return
	}
	payload := b[hdrSize : hdrSize+int(h.Len)]
	if h.Credits > 0 {
		p.mu.Lock()
		p.credits += int(h.Credits)
		p.mu.Unlock()
	}
	switch h.Kind {
	case kindData:
		t.mu.Lock()
		delete(t.posted, mkey{p.rank, h.Tag})
		err := t.m.Deliver(p.rank, h.Tag, h.Desc, payload)
		t.mu.Unlock()
		if err != nil {
			if errors.Is(err, transport.ErrProtocol) {
				t.protocolError(p.rank, err)
			}
		} else {
			t.recvd.Add(uint64(len(payload)))
			t.msgsRecvd.Add(1)
		}
	case kindRTS:
		t.onRTS(p, h)
	case kindCTS:
		t.onCTS(p, h)
	case kindFailOp:
		t.failOp(h.Tag.Comm, h.Tag.Seq, &transport.RemoteFailure{Peer: p.rank, Reason: string(payload)})
	case kindBye:
		t.peerLost(p.rank, errors.New(string(payload)))
	}
	p.mu.Lock()
	p.freed++
	p.mu.Unlock()
}

func (t *Transport) onRTS(p *peer, h header) {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	if _, failed := t.failed[opKey{h.Tag.Comm, h.Tag.Seq}]; failed {
		t.mu.Unlock()
		t.enqueue(p, &outMsg{hdr: header{Kind: kindCTS, Tag: h.Tag, ID: h.ID, Flags: ctsDiscard}})
		return
	}
	pr, ok := t.posted[k]
	if !ok {
		if _, dup := t.pendingRTS[k]; dup {
			t.mu.Unlock()
			t.protocolError(p.rank, fmt.Errorf("%w: rank %d sent two messages with %v", transport.ErrProtocol, p.rank, h.Tag))
			return
		}
		t.pendingRTS[k] = h // answered when the receive is posted
		t.mu.Unlock()
		return
	}
	delete(t.posted, k)
	cts, err := t.claimLocked(p.rank, h, pr.buf)
	t.mu.Unlock()
	t.enqueue(p, &outMsg{hdr: cts})
	if err != nil {
		t.fail(err)
	}
}

// onCTS writes a rendezvous payload into the buffer the receiver gave.
func (t *Transport) onCTS(p *peer, h header) {
	t.mu.Lock()
	rs := t.sends[h.ID]
	if rs != nil && h.Flags&ctsDiscard != 0 {
		delete(t.sends, h.ID)
	}
	t.mu.Unlock()
	if rs == nil || rs.peer != p.rank {
		if t.Err() == nil {
			t.protocolError(p.rank, fmt.Errorf("%w: clear-to-send for unknown send %d", transport.ErrProtocol, h.ID))
		}
		return
	}
	if h.Flags&ctsDiscard != 0 {
		// The receiver dropped the message (its operation failed or the
		// descriptors differ): the send is over, as on TCP.
		rs.req.Complete(nil, nil)
		return
	}
	if err := t.buildWrites(p, rs, h); err != nil {
		t.fail(err)
		return
	}
	t.enqueue(p, &outMsg{rndv: rs})
}

// buildWrites registers the send buffers and turns them into RDMA write
// requests, each of up to maxSendSGE buffers and maxWrite bytes, laid end
// to end in the receiver's buffer; the last one carries the immediate.
func (t *Transport) buildWrites(p *peer, rs *rndvSend, cts header) error {
	maxSGE := p.qp.Caps().MaxSendSGE
	remote := cts.Size
	var wrs []verbs.SendWR
	cur := verbs.SendWR{Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
	curLen := 0
	flush := func() {
		wrs = append(wrs, cur)
		remote += uint64(curLen)
		cur = verbs.SendWR{Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
		curLen = 0
	}
	for _, b := range rs.bufs {
		if len(b) == 0 {
			continue
		}
		h, err := t.cache.Acquire(b)
		if err != nil {
			return fmt.Errorf("rdma: registering a %d-byte send buffer for rank %d: %w", len(b), p.rank, err)
		}
		rs.handles = append(rs.handles, h)
		lkey := h.Region().LKey()
		for len(b) > 0 {
			take := min(len(b), maxWrite-curLen)
			cur.SGEs = append(cur.SGEs, verbs.SGE{Addr: addrOf(b), Length: uint32(take), LKey: lkey})
			curLen += take
			b = b[take:]
			if curLen == maxWrite || len(cur.SGEs) == maxSGE {
				flush()
			}
		}
	}
	if curLen > 0 {
		flush()
	}
	if len(wrs) >= p.qp.Caps().MaxSendWR {
		return fmt.Errorf("%w: a send of %d buffers needs %d work requests, the queue holds %d",
			transport.ErrInvalid, len(rs.bufs), len(wrs), p.qp.Caps().MaxSendWR)
	}
	last := &wrs[len(wrs)-1]
	last.Opcode = verbs.OpRDMAWriteWithImm
	last.Imm = makeImm(immDone, cts.ID2)
	last.Signaled = true
	last.ID = makeWRID(wrRndv, p.rank, cts.ID)
	rs.wrs = wrs
	return nil
}

// onRndvDone: the last write of a rendezvous send completed.
func (t *Transport) onRndvDone(p *peer, id uint32) {
	t.mu.Lock()
	rs := t.sends[id]
	delete(t.sends, id)
	t.mu.Unlock()
	if rs == nil {
		return // failed meanwhile
	}
	p.completed(len(rs.wrs), false)
	for _, h := range rs.handles {
		h.Release()
	}
	t.sent.Add(uint64(rs.n))
	t.msgsSent.Add(1)
	rs.req.Complete(nil, nil)
}

// onDone: a rendezvous payload has landed in the claimed buffer.
func (t *Transport) onDone(p *peer, id uint32) {
	t.mu.Lock()
	rr := t.recvs[id]
	delete(t.recvs, id)
	t.mu.Unlock()
	if rr == nil || rr.peer != p.rank {
		if t.Err() == nil {
			t.protocolError(p.rank, fmt.Errorf("%w: rendezvous completion for unknown receive %d", transport.ErrProtocol, id))
		}
		return
	}
	rr.release()
	t.recvd.Add(uint64(rr.n))
	t.msgsRecvd.Add(1)
	rr.done()
}
