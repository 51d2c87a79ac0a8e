package rdma

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// FailOp implements transport.Transport: the peers are told err's code
// and text.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {
	t.failOp(comm, seq, err)
	failure := failurePayload(t.rank, err, t.cfg.EagerLimit)
	for _, p := range t.peers {
		if p != nil {
			t.enqueue(p, &outMsg{hdr: header{Kind: kindFailOp, Tag: transport.Tag{Comm: comm, Seq: seq}},
				bufs: [][]byte{failure}})
		}
	}
	t.unpark() // the operation's unexpected messages are gone: room for parked ones
}

// failOp fails (comm, seq) on this rank: its receives, and the RTS of
// peers waiting for a receive of it, which are told to drop the message.
func (t *Transport) failOp(comm uint32, seq uint64, err error) {
	t.m.FailOp(comm, seq, err)
	op := opKey{comm, seq}
	type discard struct {
		peer int
		cts  header
	}
	var drops []discard
	t.mu.Lock()
	if _, seen := t.failed[op]; !seen {
		t.failed[op] = struct{}{}
		t.failedFIFO = append(t.failedFIFO, op)
		if len(t.failedFIFO) > maxFailedOp {
			delete(t.failed, t.failedFIFO[0])
			t.failedFIFO = t.failedFIFO[1:]
		}
	}
	for k := range t.posted {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			delete(t.posted, k)
		}
	}
	for k, rts := range t.pendingRTS {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			delete(t.pendingRTS, k)
			drops = append(drops, discard{k.peer, header{Kind: kindCTS, Tag: rts.Tag, ID: rts.ID, Flags: ctsDiscard}})
		}
	}
	revokes := t.revokeAdvertsLocked(comm, seq, func(*advert) error { return err })
	t.mu.Unlock()
	for _, d := range drops {
		t.enqueue(t.peers[d.peer], &outMsg{hdr: d.cts})
	}
	t.sendRevokes(revokes)
}

// kindMismatchLocked follows the matcher's per-operation kind check when a
// message of another collective kind arrived for an operation this rank
// runs: the matcher failed the operation's posted receives, and the
// receives whose buffers are on offer fail too, with the same mismatch.
// Called with t.mu held; the revokes are for sendRevokes.
func (t *Transport) kindMismatchLocked(peer int, tag transport.Tag, remote transport.Desc) []revoke {
	for k := range t.posted {
		if k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq {
			delete(t.posted, k)
		}
	}
	return t.revokeAdvertsLocked(tag.Comm, tag.Seq, func(a *advert) error {
		return &transport.MismatchError{Tag: tag, Local: a.desc, Peer: peer, Remote: remote, Rank: t.rank}
	})
}

// Abort implements transport.Transport: peers are told, then every queue
// pair is moved to the error state and everything pending fails.
func (t *Transport) Abort(err error) {
	if t.Err() == nil {
		t.sayBye(fmt.Sprintf("rank %d aborted: %v", t.rank, err), byeAborted)
	}
	t.fail(fmt.Errorf("%w: %w", transport.ErrAborted, err))
}

// Close implements transport.Transport. Peers see this rank as lost.
func (t *Transport) Close() error {
	t.closeOne.Do(func() {
		if err := t.Err(); err == nil {
			t.sayBye(fmt.Sprintf("rank %d closed its transport", t.rank), 0)
		} else {
			// Peers still connected learn the root cause (for example
			// which rank died) rather than just this rank's departure.
			t.sayBye(fmt.Sprintf("rank %d closed its transport after: %v", t.rank, err), 0)
		}
		t.fail(transport.ErrClosed)
		t.stop.Store(true)
		t.wake()
		<-t.done
		// A waiter may be polling: pollMu keeps it off the completion
		// queue while it is destroyed (it sees stop once it gets in).
		t.pollMu.Lock()
		t.destroy()
		t.pollMu.Unlock()
	})
	return nil
}

// sayBye tells every peer this rank is going away (flags: byeAborted for
// Abort), and waits briefly for the messages to be acknowledged so that
// moving the queue pairs to the error state does not flush them.
func (t *Transport) sayBye(reason string, flags uint32) {
	for _, p := range t.peers {
		if p != nil {
			t.byeOut.Add(1)
			t.enqueue(p, &outMsg{hdr: header{Kind: kindBye, Flags: flags}, bufs: [][]byte{[]byte(reason)}, bye: true})
		}
	}
	deadline := time.NewTimer(byeWait)
	defer deadline.Stop()
	for t.byeOut.Load() > 0 {
		select {
		case <-t.byeCh:
		case <-deadline.C:
			return
		}
	}
}

// wake interrupts the progress loop's wait, for Close.
func (t *Transport) wake() {
	t.ch.Interrupt()
	t.kickProgress()
}

// fail makes err the transport's sticky error (the first one wins) and
// fails everything pending. Queue pairs go to the error state first, so
// that no peer can write into a buffer after its request has failed.
func (t *Transport) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	err = t.err
	sends, recvs := t.sends, t.recvs
	t.sends, t.recvs = map[uint32]*rndvSend{}, map[uint32]*rndvRecv{}
	clear(t.posted)
	clear(t.pendingRTS)
	clear(t.adverts)
	clear(t.advs)
	clear(t.sendTags)
	t.mu.Unlock()
	// A lost peer fails this rank's operations, but only the dead peer's
	// queue pair goes to the error state: the other ranks must learn of
	// the death from the dead rank itself (their own keep-alives, or this
	// rank's goodbye naming the cause), not from a cascade of queue pairs
	// failing that would name whoever noticed first.
	lost := -1
	var pe *transport.PeerError
	if errors.As(err, &pe) && errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrAborted) {
		lost = pe.Peer
	}
	for _, p := range t.peers {
		if p != nil && (lost < 0 || p.rank == lost) {
			p.kill(err)
		}
	}
	t.m.Abort(err)
	for _, rs := range sends {
		for _, h := range rs.handles {
			h.Release()
		}
		rs.req.Complete(nil, err)
	}
	for _, rr := range recvs {
		rr.release() // the request was failed by the matcher
	}
}

func (t *Transport) peerLost(peer int, cause error) {
	if t.Err() != nil {
		return
	}
	t.cfg.Log.Warnf(logging.RDMA, "lost rank %d: %v", peer, cause)
	t.fail(&transport.PeerError{Peer: peer, Kind: transport.ErrPeerLost, Err: cause})
}

// peerClosed handles a peer's goodbye from Close. A graceful close is not
// a failure of the job: everything the peer sent before it has been
// handled (the goodbye is its last message), so only what still involves
// the peer fails, with an error naming it, and the transport goes on with
// the other ranks. The peer's queue pair goes to the error state, its
// completion errors from then on are expected.
func (t *Transport) peerClosed(p *peer, reason string) {
	err := &transport.PeerError{Peer: p.rank, Kind: transport.ErrPeerLost, Err: errors.New(reason)}
	var sends []*rndvSend
	var recvs []*rndvRecv
	t.mu.Lock()
	if t.err != nil || p.gone != nil {
		t.mu.Unlock()
		return
	}
	p.gone = err
	for id, rs := range t.sends {
		if rs.peer == p.rank {
			delete(t.sends, id)
			sends = append(sends, rs)
		}
	}
	for id, rr := range t.recvs {
		if rr.peer == p.rank {
			delete(t.recvs, id)
			recvs = append(recvs, rr)
		}
	}
	ofPeer := func(k mkey) bool { return k.peer == p.rank }
	maps.DeleteFunc(t.posted, func(k mkey, _ postedRecv) bool { return ofPeer(k) })
	maps.DeleteFunc(t.pendingRTS, func(k mkey, _ header) bool { return ofPeer(k) })
	maps.DeleteFunc(t.advs, func(k mkey, _ header) bool { return ofPeer(k) })
	maps.DeleteFunc(t.adverts, func(k mkey, _ *rndvRecv) bool { return ofPeer(k) })
	maps.DeleteFunc(t.sendTags, func(k mkey, _ uint32) bool { return ofPeer(k) })
	// Under t.mu, so that no receive from the peer is posted between
	// this and the matcher knowing it is gone.
	t.m.FailPeer(p.rank, err)
	t.mu.Unlock()
	t.cfg.Log.Tracef(logging.RDMA, "%v", err)
	p.kill(err)
	for _, rs := range sends {
		for _, h := range rs.handles {
			h.Release()
		}
		rs.req.Complete(nil, err)
	}
	for _, rr := range recvs {
		rr.release()
		if rr.adv != nil {
			rr.adv.req.Complete(nil, err)
			rr.done()
		} else {
			rr.fail(err)
		}
	}
}

func (t *Transport) protocolError(peer int, err error) {
	if t.Err() != nil {
		return
	}
	t.fail(&transport.PeerError{Peer: peer, Kind: transport.ErrProtocol, Err: err})
}
