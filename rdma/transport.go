// Package rdma is the RDMA transport: one reliable-connected queue pair per
// peer (full mesh), set up through the bootstrap store, with two protocols.
//
// Eager (messages up to Config.EagerLimit): the payload is copied into a
// registered staging slot and written with RDMA write with immediate into
// the next slot of the peer's receive ring; the send completes at once.
// The receiver copies the slot out (into the posted buffer when the
// receive is already posted) and frees it. Senders hold one credit per
// free remote slot; credits come back piggybacked on every message and by
// explicit zero-length sends when traffic is one-way. A message whose
// receive is not posted is copied into a buffer of the matcher's, within
// a per-peer budget (Config.UnexpectedLimit); once that is spent, the
// slot, and the peer's slots behind it, stay occupied until receives are
// posted, so the peer runs out of credits and its sends wait.
//
// Rendezvous (larger messages, no copy): the sender announces the message
// (RTS). When the matching receive is posted, the receiver registers its
// destination buffer through the registration cache and answers with its
// address and rkey (CTS); the sender RDMA-writes the payload straight from
// the caller's buffers into it, and the last write carries an immediate
// that completes the receive. The receiver only exposes a buffer for a
// message it has claimed in the matcher, so a failed operation never
// returns a buffer to the caller that the peer may still write into.
//
// Advertised rendezvous: a receive larger than the eager limit that is
// posted before its RTS came is claimed at once and its buffer offered to
// the sender (kindAdv), so a send of the same size and descriptor is
// written straight away: one half round trip instead of three (RTS, CTS,
// data), which is most of a medium message's time when wake-ups are slow.
// An offer that does not fit is refused (kindNack) and the RTS goes the
// ordinary way; one overtaken by an eager message is withdrawn
// (kindCancel); a failed operation asks it back (kindRevoke) and fails the
// receive only once the sender confirms (kindRevoked). Config.NoAdvertise
// turns it off.
//
// A progress goroutine polls the completion queue in batches, busy-polls
// for Config.Spin when idle and then blocks on the completion channel. A
// failed completion, the goodbye of a peer that aborted, or a keep-alive
// write that is not acknowledged makes the transport fail with a sticky
// transport.PeerError wrapping transport.ErrPeerLost; every pending
// request fails and nothing waits forever. The goodbye of a peer that
// closed fails only what still involves it, naming it: the transport
// goes on with the other ranks.
package rdma

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// Queue sizes per peer.
const (
	sqDepth     = 256
	maxSendSGE  = 16
	maxInline   = 128
	pollBatch   = 32
	yieldEvery  = 32      // waitPoll: polls between sched_yield calls
	maxWrite    = 1 << 30 // bytes per RDMA write work request
	byeWait     = 200 * time.Millisecond
	maxFailedOp = 4096
)

// Transport is an RDMA transport.Transport. Create it with New.
type Transport struct {
	cfg      Config
	rank     int
	size     int
	ep       *endpoint
	pd       *verbs.PD
	ch       *verbs.CompChannel
	cq       *verbs.CQ
	peers    []*peer // nil at this rank
	cache    *memreg.Cache[*verbs.MR]
	m        *transport.Matcher
	slotSize int

	stop        atomic.Bool
	done        chan struct{}
	pollMu      sync.Mutex                                            // held while polling and handling completions
	spinning    atomic.Bool                                           // a waiter busy-polls (waitPoll)
	parkedPeers atomic.Int32                                          // peers with ring slots parked for the budget
	sleepers    atomic.Int32                                          // waiters sleeping on their request meanwhile
	kick        chan struct{}                                         // the polling waiter left (progress parks on it)
	waitF       func(ctx context.Context, r *transport.Request) error // t.waitFor, made once
	kaTimer     *time.Timer                                           // progress goroutine only
	byeOut      atomic.Int32
	byeCh       chan struct{}
	touched     []*peer // peers to repost receives or drain after a batch
	closeOne    sync.Once

	sent, recvd, msgsSent, msgsRecvd atomic.Uint64

	mu         sync.Mutex
	err        error
	posted     map[mkey]postedRecv // receives posted, not yet matched
	pendingRTS map[mkey]header     // RTS waiting for its receive
	sends      map[uint32]*rndvSend
	recvs      map[uint32]*rndvRecv
	failed     map[opKey]struct{}
	failedFIFO []opKey
	adverts    map[mkey]*rndvRecv // receiver: buffers on offer, not yet resolved
	advs       map[mkey]header    // sender: offers received before their Send
	sendTags   map[mkey]uint32    // sender: rendezvous sends waiting for a CTS or an offer
	nextSend   uint32
	nextRecv   uint32
}

type postedRecv struct {
	req *transport.Request
	buf []byte
}

type mkey struct {
	peer int
	tag  transport.Tag
}

type opKey struct {
	comm uint32
	seq  uint64
}

var _ transport.Transport = (*Transport)(nil)

// Name implements transport.Transport.
func (t *Transport) Name() string { return "rdma" }

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// Device names the device and port in use ("rxe0:1").
func (t *Transport) Device() string { return fmt.Sprintf("%s:%d", t.ep.ctx.Name(), t.ep.port) }

func (t *Transport) checkPeer(peer int) error {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return fmt.Errorf("%w: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, t.rank, peer, t.size)
	}
	return nil
}

// Send implements transport.Transport.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	if err := t.Err(); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	req := transport.NewRequest(peer, tag, true)
	req.SetWaiter(t.waitF)
	p := t.peers[peer]
	if n <= t.cfg.EagerLimit {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindData, Tag: tag, Desc: desc}, bufs: bufs, req: req})
		return req
	}
	rs := &rndvSend{req: req, peer: peer, desc: desc, bufs: bufs, n: n}
	k := mkey{peer, tag}
	t.mu.Lock()
	if err := cmp.Or(t.err, p.gone); err != nil {
		t.mu.Unlock()
		req.Complete(nil, err)
		return req
	}
	t.nextSend++
	id := t.nextSend
	t.sends[id] = rs
	adv, offered := t.advs[k]
	delete(t.advs, k)
	t.mu.Unlock()
	if offered && t.useAdvert(p, rs, id, adv) {
		return req // written straight into the offered buffer
	}
	t.enqueue(p, &outMsg{hdr: header{Kind: kindRTS, Tag: tag, Desc: desc, Size: uint64(n), ID: id}})
	// An offer arriving from now on takes the send over; one that came
	// while the RTS was being queued is taken here. The RTS is queued
	// first so that it never follows the payload.
	t.mu.Lock()
	adv, offered = t.advs[k]
	delete(t.advs, k)
	if !offered && t.sends[id] != nil {
		t.sendTags[k] = id
	}
	t.mu.Unlock()
	if offered {
		t.useAdvert(p, rs, id, adv)
	}
	return req
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	req := t.recv(peer, tag, desc, buf)
	t.unpark() // the receive may be for a parked message, or make room
	return req
}

func (t *Transport) recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	k := mkey{peer, tag}
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return transport.Failed(peer, tag, false, err)
	}
	req := t.m.Post(peer, tag, desc, buf)
	req.SetWaiter(t.waitF)
	if done, _ := req.Test(); done {
		t.mu.Unlock()
		return req
	}
	rts, ok := t.pendingRTS[k]
	if !ok {
		if !t.cfg.NoAdvertise && len(buf) > t.cfg.EagerLimit && len(buf) <= 1<<32-1 {
			adv, err := t.advertiseLocked(peer, tag, desc, req, buf)
			t.mu.Unlock()
			if err != nil {
				t.fail(err)
			} else if adv != nil {
				t.sendAdvert(peer, adv)
			}
			return req
		}
		t.posted[k] = postedRecv{req, buf}
		t.mu.Unlock()
		return req
	}
	delete(t.pendingRTS, k)
	cts, err := t.claimLocked(peer, rts, buf)
	t.mu.Unlock()
	t.enqueue(t.peers[peer], &outMsg{hdr: cts})
	if err != nil {
		t.fail(err)
	}
	return req
}

// Err implements transport.Transport.
func (t *Transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats {
	return transport.Stats{BytesSent: t.sent.Load(), BytesRecv: t.recvd.Load(),
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecvd.Load()}
}

// Caps implements transport.Transport: RDMA announces no capability
// beyond the contract. A failure cannot be watched or made local (a Route
// polls Err and aborts RDMA instead), a lost peer is sticky, and an
// operation fails on every rank.
func (t *Transport) Caps() transport.Capabilities { return transport.Capabilities{} }

// CacheStats returns the registration cache's counters.
func (t *Transport) CacheStats() memreg.CacheStats { return t.cache.Stats() }

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
