package rdma

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// progress polls the completion queue until Close. While completions
// come it polls in batches; once idle it busy-polls for Config.Spin and
// then blocks on the completion channel, waking at least every KeepAlive
// to probe the peers.
//
// Goroutines waiting on a request poll too (waitPoll): one of them at a
// time busy-polls the completion queue itself, and meanwhile this loop
// parks, so that a process has one polling thread, not two. Waiters that
// found the poller's place taken sleep on their request; once the
// polling waiter is done this loop polls for them until they are done or
// give up. pollMu makes sure one goroutine at a time handles completions.
func (t *Transport) progress() {
	defer close(t.done)
	wcs := make([]verbs.WorkCompletion, pollBatch)
	lastWork, lastKA := time.Now(), time.Now()
	for !t.stop.Load() {
		t.pollMu.Lock()
		n, err := t.pollLocked(wcs)
		t.pollMu.Unlock()
		if err != nil {
			t.fail(fmt.Errorf("rdma: %w", err))
			return
		}
		if n > 0 {
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
		switch {
		case t.spinning.Load():
			t.parkWhileSpinning()
			lastWork = time.Now()
		case t.sleepers.Load() > 0:
			// Waiters sleep on their requests: poll for them, politely
			// (their goroutines, readied here, run on this thread).
			runtime.Gosched()
			yieldThread()
		case now.Sub(lastWork) < t.cfg.Spin:
			runtime.Gosched()
		default:
			if err := t.block(wcs); err != nil {
				t.fail(fmt.Errorf("rdma: %w", err))
				return
			}
			lastWork = time.Now()
		}
	}
}

// pollLocked polls the completion queue once and handles what came.
func (t *Transport) pollLocked(wcs []verbs.WorkCompletion) (int, error) {
	n, err := t.cq.Poll(wcs)
	if err != nil || n == 0 {
		return 0, err
	}
	t.handle(wcs[:n])
	return n, nil
}

// waitFor is the waiter of every request (transport.Request.SetWaiter):
// it polls (waitPoll), then blocks.
func (t *Transport) waitFor(ctx context.Context, r *transport.Request) error {
	t.waitPoll(r.Completion())
	return transport.AwaitRequest(ctx, r)
}

// waitPoll is called by a goroutine about to wait for a request. The
// first such goroutine busy-polls the completion queue itself until done
// is closed or Config.WaitSpin has passed, handing its thread to other
// goroutines and processes between polls (a completion for another
// request is handled all the same). While it does, the others sleep on
// done for at most WaitSpin, counted in sleepers so that the progress
// loop keeps polling for them when the poller leaves.
func (t *Transport) waitPoll(done <-chan struct{}) {
	if t.cfg.WaitSpin <= 0 || t.stop.Load() {
		return
	}
	if !t.spinning.CompareAndSwap(false, true) {
		t.sleepers.Add(1)
		timer := time.NewTimer(t.cfg.WaitSpin)
		select {
		case <-done:
		case <-timer.C:
		}
		timer.Stop()
		t.sleepers.Add(-1)
		return
	}
	defer func() {
		t.spinning.Store(false)
		t.kickProgress()
	}()
	var wcs [pollBatch]verbs.WorkCompletion
	deadline := time.Now().Add(t.cfg.WaitSpin)
	for i := 1; ; i++ {
		if t.pollMu.TryLock() {
			if t.stop.Load() { // Close is destroying the queues
				t.pollMu.Unlock()
				return
			}
			_, err := t.pollLocked(wcs[:])
			t.pollMu.Unlock()
			if err != nil {
				t.fail(fmt.Errorf("rdma: %w", err))
				return
			}
		}
		select {
		case <-done:
			return
		default:
		}
		if i%16 == 0 && (t.stop.Load() || time.Now().After(deadline)) {
			return
		}
		runtime.Gosched()
		// Other threads on this CPU (this process's, the peer rank's
		// when ranks share CPUs) get their turn.
		yieldThread()
	}
}

// kickProgress wakes the progress loop from parkWhileSpinning.
func (t *Transport) kickProgress() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// parkWhileSpinning parks the progress goroutine while a waiter polls,
// for at most KeepAlive. The waiter wakes it through kick when it stops:
// a hand-off between goroutines that needs no other thread to be woken.
func (t *Transport) parkWhileSpinning() {
	t.kaTimer.Reset(t.cfg.KeepAlive)
	select {
	case <-t.kick:
	case <-t.kaTimer.C:
	}
	t.kaTimer.Stop()
}

// block arms the CQ, polls once more (a completion that arrived before
// arming raises no event) and then waits for the channel, parked in Go's
// poller, for at most KeepAlive.
func (t *Transport) block(wcs []verbs.WorkCompletion) error {
	if err := t.cq.ReqNotify(false); err != nil {
		return err
	}
	t.pollMu.Lock()
	n, err := t.pollLocked(wcs)
	t.pollMu.Unlock()
	if err != nil || n > 0 {
		return err
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
		if t.Err() == nil && !p.isDead() {
			if err := p.postRecvs(); err != nil {
				t.peerLost(p.rank, err)
			}
		}
		p.drain()
	}
	t.touched = t.touched[:0]
	// A fail-op in this batch may have made room for parked messages.
	t.unparkLocked()
}

func (t *Transport) completionError(p *peer, kind uint8, wc *verbs.WorkCompletion) {
	if t.Err() != nil || p.isDead() {
		return // flushes after the transport failed or the peer closed
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
		// The credits a slot carries are for the other direction: they
		// count on arrival, even for a slot that waits behind a parked
		// one, or two ranks flooding each other would hold each other's
		// credits in their parked slots (the suite's budget case).
		t.takeCredits(p, int(val))
		if len(p.parked) > 0 || !t.onEager(p, int(val)) {
			t.park(p, int(val))
		}
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

// takeCredits counts the credits piggybacked on the message in a ring
// slot and clears them there, so that a slot read again after it was
// parked does not count them twice.
func (t *Transport) takeCredits(p *peer, slot int) {
	b := p.ring(slot)
	if len(b) < hdrSize {
		return // onEager reports it
	}
	n := le.Uint16(b[2:])
	if n == 0 {
		return
	}
	le.PutUint16(b[2:], 0)
	p.mu.Lock()
	p.credits += int(n)
	p.mu.Unlock()
}

// onEager handles the message in a ring slot, then frees the slot. It
// reports false, having done nothing, when the message is data that must
// wait for the unexpected budget (see park).
func (t *Transport) onEager(p *peer, slot int) bool {
	b := p.ring(slot)
	var h header
	if err := h.decode(b); err != nil {
		t.protocolError(p.rank, err)
		return true
	}
	if int(h.Len) > len(b)-hdrSize {
		t.protocolError(p.rank, fmt.Errorf("%w: eager message of %d bytes in a %d-byte slot",
			transport.ErrProtocol, h.Len, len(b)))
		return true
	}
	payload := b[hdrSize : hdrSize+int(h.Len)]
	if h.Kind == kindData && !t.deliverEager(p, h, payload) {
		return false
	}
	switch h.Kind {
	case kindRTS:
		t.onRTS(p, h)
	case kindCTS:
		t.onCTS(p, h)
	case kindFailOp:
		f, err := transport.DecodeFailure(payload, t.size)
		if err != nil {
			t.protocolError(p.rank, fmt.Errorf("failop message: %w", err))
			return true
		}
		t.failOp(h.Tag.Comm, h.Tag.Seq, f)
	case kindBye:
		if h.Flags&byeAborted != 0 {
			t.peerLost(p.rank, errors.New(string(payload)))
		} else {
			t.peerClosed(p, string(payload))
		}
	case kindAdv:
		t.onAdv(p, h)
	case kindNack:
		t.onNack(p, h)
	case kindCancel, kindRevoke:
		t.mu.Lock()
		k := mkey{p.rank, h.Tag}
		adv, ok := t.advs[k]
		if ok && adv.ID2 == h.ID2 {
			delete(t.advs, k)
		}
		t.mu.Unlock()
		if ok && adv.ID2 == h.ID2 && h.Kind == kindRevoke {
			t.enqueue(p, &outMsg{hdr: header{Kind: kindRevoked, Tag: h.Tag, ID2: h.ID2}})
		}
		// Otherwise the offer was used or refused: the payload or a
		// nack is on its way and resolves the receive.
	case kindRevoked:
		t.mu.Lock()
		rr := t.recvs[h.ID2]
		if rr == nil || rr.adv == nil || rr.peer != p.rank {
			t.mu.Unlock()
			break
		}
		t.endAdvertLocked(rr)
		t.mu.Unlock()
		rr.adv.req.Complete(nil, rr.adv.failErr)
		rr.done()
	}
	p.mu.Lock()
	p.freed++
	p.mu.Unlock()
	return true
}

// deliverEager hands an eager message to its receive: into the buffer on
// offer for it, into the posted receive, or as an unexpected message. It
// reports false, having done nothing, when the unexpected budget for the
// peer is spent.
func (t *Transport) deliverEager(p *peer, h header, payload []byte) bool {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if rr := t.adverts[k]; rr != nil {
		t.endAdvertLocked(rr)
		t.mu.Unlock()
		t.eagerIntoAdvert(p, rr, h, payload)
		return true
	}
	c, err := t.m.TryClaim(p.rank, h.Tag, h.Desc, len(payload))
	if errors.Is(err, transport.ErrNoBudget) {
		t.mu.Unlock()
		return false
	}
	delete(t.posted, k)
	var revokes []revoke
	switch {
	case err != nil:
	case c.KindMismatch():
		revokes = t.kindMismatchLocked(p.rank, h.Tag, h.Desc)
	default:
		copy(c.Dst(), payload)
		t.recvd.Add(uint64(len(payload)))
		t.msgsRecvd.Add(1)
		c.Finish()
	}
	t.mu.Unlock()
	t.sendRevokes(revokes)
	if errors.Is(err, transport.ErrProtocol) {
		t.protocolError(p.rank, err)
	}
	return true
}

// park keeps a ring slot whose message waits for the unexpected budget;
// the slots that arrive after it from the same peer wait behind it, so
// that the peer's messages are handled in order. Called with pollMu held.
func (t *Transport) park(p *peer, slot int) {
	if len(p.parked) == 0 {
		t.parkedPeers.Add(1)
	}
	p.parked = append(p.parked, slot)
}

// unparkLocked handles the parked slots that the budget now takes, in
// order, and returns their credits. Called with pollMu held.
func (t *Transport) unparkLocked() {
	if t.parkedPeers.Load() == 0 {
		return
	}
	for _, p := range t.peers {
		if p == nil || len(p.parked) == 0 {
			continue
		}
		n := 0
		for n < len(p.parked) && t.onEager(p, p.parked[n]) {
			n++
		}
		if n == 0 {
			continue
		}
		p.parked = p.parked[:copy(p.parked, p.parked[n:])]
		if len(p.parked) == 0 {
			t.parkedPeers.Add(-1)
		}
		p.drain()
	}
}

// unpark retries the parked slots from outside the progress loop, after
// a receive was posted or an operation failed (either may make room).
func (t *Transport) unpark() {
	if t.parkedPeers.Load() == 0 {
		return
	}
	t.pollMu.Lock()
	if !t.stop.Load() {
		t.unparkLocked()
	}
	t.pollMu.Unlock()
}

func (t *Transport) onRTS(p *peer, h header) {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	if rr := t.adverts[k]; rr != nil {
		// The RTS crossed our offer: the sender takes the offer when it
		// arrives, or refuses it with a nack, which resolves this RTS.
		if !rr.adv.nacked {
			rr.adv.rts = &h
			t.mu.Unlock()
			return
		}
		t.endAdvertLocked(rr)
		t.mu.Unlock()
		t.advertToRTS(p, rr, h)
		return
	}
	if _, failed := t.failed[opKey{h.Tag.Comm, h.Tag.Seq}]; failed {
		t.mu.Unlock()
		t.enqueue(p, &outMsg{hdr: header{Kind: kindCTS, Tag: h.Tag, ID: h.ID, Flags: ctsDiscard}})
		return
	}
	if t.m.CheckKind(p.rank, h.Tag, h.Desc) {
		// Another collective's message: its operation has failed here.
		revokes := t.kindMismatchLocked(p.rank, h.Tag, h.Desc)
		delete(t.posted, k)
		t.mu.Unlock()
		t.sendRevokes(revokes)
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
	if k := (mkey{p.rank, h.Tag}); t.sendTags[k] == h.ID {
		delete(t.sendTags, k)
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
	// Every request names the send, not only the signalled last one: a
	// request that fails completes (in error) signalled or not, and its
	// completion must name the right peer and operation.
	wrid := makeWRID(wrRndv, p.rank, cts.ID)
	cur := verbs.SendWR{ID: wrid, Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
	curLen := 0
	flush := func() {
		wrs = append(wrs, cur)
		remote += uint64(curLen)
		cur = verbs.SendWR{ID: wrid, Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
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
	rs.wrs = wrs
	return nil
}

// onAdv: a receiver offers its buffer for tag. A send waiting for its CTS
// takes it now; a later Send finds it in advs.
func (t *Transport) onAdv(p *peer, h header) {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	id, waiting := t.sendTags[k]
	var rs *rndvSend
	if waiting {
		delete(t.sendTags, k)
		rs = t.sends[id]
	}
	if rs == nil {
		if _, dup := t.advs[k]; dup {
			t.mu.Unlock()
			t.protocolError(p.rank, fmt.Errorf("%w: rank %d offered two buffers for %v", transport.ErrProtocol, p.rank, h.Tag))
			return
		}
		t.advs[k] = h
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.useAdvert(p, rs, id, h)
}

// useAdvert writes send id straight into an offered buffer when the sizes
// and descriptors agree (the receiver then learns both from the offer it
// made), and otherwise refuses the offer. It reports whether it wrote.
func (t *Transport) useAdvert(p *peer, rs *rndvSend, id uint32, adv header) bool {
	if uint64(rs.n) != uint64(adv.ID) || rs.desc != adv.Desc {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindNack, Tag: adv.Tag, ID2: adv.ID2}})
		return false
	}
	cts := header{Kind: kindCTS, Tag: adv.Tag, ID: id, ID2: adv.ID2, Size: adv.Size, RKey: adv.RKey}
	if err := t.buildWrites(p, rs, cts); err != nil {
		t.fail(err)
		return true
	}
	t.enqueue(p, &outMsg{rndv: rs})
	return true
}

// onNack: the sender refused our offer; its RTS (before or after the nack)
// goes the ordinary way.
func (t *Transport) onNack(p *peer, h header) {
	t.mu.Lock()
	rr := t.recvs[h.ID2]
	if rr == nil || rr.adv == nil || rr.peer != p.rank {
		t.mu.Unlock()
		return
	}
	if rr.adv.rts == nil {
		rr.adv.nacked = true
		t.mu.Unlock()
		return
	}
	t.endAdvertLocked(rr)
	t.mu.Unlock()
	t.advertToRTS(p, rr, *rr.adv.rts)
}

// endAdvertLocked withdraws an offer the sender will not write into.
func (t *Transport) endAdvertLocked(rr *rndvRecv) {
	delete(t.recvs, rr.adv.id)
	delete(t.adverts, mkey{rr.peer, rr.adv.tag})
	rr.release()
}

// advertToRTS answers an RTS for a receive whose offer was refused, as
// claimLocked does for a posted one; the receive is already claimed, so
// it is completed here, not by the matcher.
func (t *Transport) advertToRTS(p *peer, rr *rndvRecv, rts header) {
	a := rr.adv
	cts := header{Kind: kindCTS, Tag: rts.Tag, ID: rts.ID, Flags: ctsDiscard}
	fail := func(err error) {
		a.req.Complete(nil, err)
		rr.done()
		t.enqueue(p, &outMsg{hdr: cts})
	}
	if a.failErr != nil {
		fail(a.failErr)
		return
	}
	if rts.Desc != a.desc {
		fail(&transport.MismatchError{Tag: rts.Tag, Local: a.desc, Peer: p.rank, Remote: rts.Desc, Rank: t.rank})
		return
	}
	dst := a.buf[:0]
	if cap(dst) < int(rts.Size) {
		dst = make([]byte, rts.Size)
	}
	dst = dst[:rts.Size]
	nr := &rndvRecv{peer: p.rank, n: len(dst), done: func() { a.req.Complete(dst, nil); rr.done() }}
	var err error
	var rkey uint32
	if unsafe.SliceData(dst) == unsafe.SliceData(a.buf) {
		nr.handle, err = t.cache.Acquire(dst)
		if err == nil {
			rkey = nr.handle.Region().RKey()
		}
	} else {
		nr.own, err = t.pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err == nil {
			rkey = nr.own.RKey()
		}
	}
	if err != nil {
		t.fail(fmt.Errorf("rdma: registering a %d-byte receive buffer from rank %d: %w", len(dst), p.rank, err))
		return
	}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		nr.release()
		return
	}
	id := t.newRecvIDLocked()
	t.recvs[id] = nr
	t.mu.Unlock()
	cts.ID2, cts.Size, cts.RKey, cts.Flags = id, addrOf(dst), rkey, 0
	t.enqueue(p, &outMsg{hdr: cts})
}

// eagerIntoAdvert delivers an eager message for a receive whose buffer was
// on offer (the sender had not seen the offer, or the message is small),
// and tells the sender to forget the offer.
func (t *Transport) eagerIntoAdvert(p *peer, rr *rndvRecv, h header, payload []byte) {
	a := rr.adv
	t.enqueue(p, &outMsg{hdr: header{Kind: kindCancel, Tag: h.Tag, ID2: a.id}})
	if h.Desc != a.desc {
		a.req.Complete(nil, &transport.MismatchError{Tag: h.Tag, Local: a.desc, Peer: p.rank, Remote: h.Desc, Rank: t.rank})
		rr.done()
		return
	}
	var data []byte
	if cap(a.buf) >= len(payload) {
		data = a.buf[:len(payload)]
	} else {
		data = make([]byte, len(payload))
	}
	copy(data, payload)
	t.recvd.Add(uint64(len(payload)))
	t.msgsRecvd.Add(1)
	a.req.Complete(data, nil)
	rr.done()
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
	if rr != nil && rr.adv != nil && rr.peer == p.rank {
		delete(t.adverts, mkey{rr.peer, rr.adv.tag})
	}
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
