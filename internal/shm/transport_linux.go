//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// Transport is one rank's shared-memory transport to the other ranks of
// its host. It implements transport.Transport (for the ranks of
// Config.Peers).
type Transport struct {
	cfg   Config
	rank  int
	size  int
	m     *transport.Matcher
	peers []*peer // by job rank; nil for this rank and ranks not on this host
	local []*peer // the peers on this host, ascending rank
	probe [32]byte

	inbox              []byte // this rank's inbox (layout.go)
	seq, awake, closed *uint32

	pollMu     sync.Mutex    // held while reading rings and reaping sends (poll.go)
	polledSeq  atomic.Uint32 // seq as of the last complete poll
	matchEpoch atomic.Uint64 // bumped by whatever may let a held ring go on
	held       atomic.Int32  // rings waiting for the unexpected budget
	sleepers   atomic.Int32  // waiters sleeping on the futex (waitFor)

	stopping atomic.Bool  // the transport failed or closes: no more polls or pulls
	filling  atomic.Int32 // pulls writing into receive buffers
	mapped   atomic.Int32 // goroutines touching the mappings outside the locks
	unmapped atomic.Bool  // set before the mappings go

	sent, recvd, msgsSent, msgsRecvd atomic.Uint64

	sticky wire.Sticky
	caps   transport.Capabilities // Caps, made once (see transport.Capabilities)

	mu        sync.Mutex
	parked    map[mkey]*rndvRecv
	parkedOps map[opKey][]mkey
	pulls     []*pullJob // single-copy reads due, found by Recv

	pullsQueued atomic.Bool // pulls is not empty

	stop         atomic.Bool
	hungUp       atomic.Bool // the sockets carried this rank's last word
	progressDone chan struct{}
	watchers     sync.WaitGroup
	closeOnce    sync.Once
	waitF        func(ctx context.Context, r *transport.Request) error
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

// New sets up this rank's shared-memory transport: it creates its inbox,
// connects to every other rank of cfg.Peers over abstract unix sockets
// (named through cfg.Store, authenticated with cfg.Token), exchanges the
// inboxes over them and checks whether the kernel lets it read each
// peer's memory. It returns once every peer is connected, or fails when
// ctx ends first. Every rank of Peers must call New with the same Peers,
// RingSize and Token.
func New(ctx context.Context, cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:          cfg,
		rank:         cfg.Rank,
		size:         cfg.Size,
		m:            transport.NewMatcher(cfg.Rank, cfg.UnexpectedLimit),
		peers:        make([]*peer, cfg.Size),
		parked:       make(map[mkey]*rndvRecv),
		parkedOps:    make(map[opKey][]mkey),
		progressDone: make(chan struct{}),
	}
	t.waitF = t.waitFor
	t.caps = transport.Capabilities{SegmentBytes: segmentBytes, Failed: t.sticky.Failed(), FailLocal: t.FailLocal}
	if err := t.setup(ctx); err != nil {
		t.release()
		return nil, err
	}
	for _, p := range t.local {
		t.watchers.Add(1)
		go t.watch(p)
	}
	go t.progress()
	return t, nil
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return "shm" }

// Caps implements transport.Transport: shared memory can be watched and
// failed on this rank alone, and has a segment size of its own. A lost
// peer is sticky (no Survive), and an operation fails on every rank (no
// FailOpLocal).
//
// The segment size: each message costs the shared rings a hand-off and the receiver a process_vm_readv; segments
// larger than the collectives' default pay those less often, and the
// copies, not the wire, are what the pipeline overlaps here. 4 MiB was
// the fastest of 0.5-4 MiB for 16M float32 at P = 4 and 8 (sparcml bench
// --transport shm, alternated; docs/DEFAULTS.md, "Segment sizes").
func (t *Transport) Caps() transport.Capabilities { return t.caps }

const segmentBytes = 4 << 20

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// Peers returns the ranks this transport serves, this one included.
func (t *Transport) Peers() []int { return append([]int(nil), t.cfg.Peers...) }

// SingleCopy reports whether messages from peer above
// Config.SingleCopyLimit are read straight from its memory (false where
// the kernel refused it, or with Config.NoSingleCopy).
func (t *Transport) SingleCopy(peer int) bool {
	p, err := t.peerFor(peer)
	return err == nil && p.canPull
}

func (t *Transport) peerFor(peer int) (*peer, error) {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return nil, fmt.Errorf("%w: shm: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, t.rank, peer, t.size)
	}
	if p := t.peers[peer]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: shm: rank %d: rank %d is not on this host's shared memory (ranks %v)", transport.ErrInvalid, t.rank, peer, t.cfg.Peers)
}

// Send implements transport.Transport. A message up to
// Config.SingleCopyLimit (or any message, where single copy is off) is
// copied into the peer's ring at once when there is room, and its request
// completes then; otherwise it waits, in order, for room that the
// peer's reading makes. A larger message is announced in the ring and
// stays in the caller's buffers until the peer, once its receive is
// posted, has read it from there; its request completes then.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	p, err := t.peerFor(peer)
	if err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	if err := t.Err(); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	var n uint64
	for _, b := range bufs {
		n += uint64(len(b))
	}
	if n > uint64(t.cfg.MaxMessage) {
		return transport.Failed(peer, tag, true, fmt.Errorf("%w: shm: rank %d: message of %d bytes to rank %d exceeds MaxMessage %d",
			transport.ErrInvalid, t.rank, n, peer, t.cfg.MaxMessage))
	}
	req := transport.NewRequest(peer, tag, true)
	req.SetWaiter(t.waitF)
	it := &outItem{h: wire.Header{Kind: wire.Data, Tag: tag, Desc: desc, Length: n}, bufs: bufs, req: req}
	if p.pullsFromMe && n > uint64(t.cfg.SingleCopyLimit) && len(bufs) <= maxIovs {
		it.h.Kind = wire.Rendezvous
	}
	p.send(it)
	return req
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	if _, err := t.peerFor(peer); err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	k := mkey{peer, tag}
	var drops []*rndvRecv
	pull := false
	t.mu.Lock()
	req := t.m.Post(peer, tag, desc, buf)
	if !req.Completed() && len(t.parked) > 0 {
		pull, drops = t.matchParkedLocked(k)
	}
	t.mu.Unlock()
	req.SetWaiter(t.waitF)
	for _, rr := range drops {
		rr.drop()
	}
	if len(drops) > 0 {
		t.completed() // a kind mismatch fails the operation's other receives
	}
	t.matchEpoch.Add(1)
	if pull || t.held.Load() > 0 {
		t.kick()
	}
	return req
}

// FailOp implements transport.Transport: the operation fails here at once
// and a fail-op frame carrying err's code and text tells every peer on
// the host.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {
	if err == nil {
		err = transport.ErrAborted
	}
	t.failOp(comm, seq, err)
	failure := transport.AppendFailure(nil, transport.FailureOf(t.rank, err))
	for _, p := range t.local {
		p.send(&outItem{h: wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Comm: comm, Seq: seq}, Length: uint64(len(failure))},
			bufs: [][]byte{failure}})
	}
}

// failOp fails (comm, seq) on this rank: its receives, and the single-copy
// messages waiting for one of them, which are dropped (their senders'
// sends complete).
func (t *Transport) failOp(comm uint32, seq uint64, err error) {
	t.m.FailOp(comm, seq, err)
	op := opKey{comm, seq}
	t.mu.Lock()
	var drops []*rndvRecv
	for _, k := range t.parkedOps[op] {
		if rr, ok := t.parked[k]; ok {
			delete(t.parked, k)
			drops = append(drops, rr)
		}
	}
	delete(t.parkedOps, op)
	t.mu.Unlock()
	for _, rr := range drops {
		rr.drop()
	}
	t.completed()
	t.matchEpoch.Add(1) // the operation's unexpected messages are gone
	if t.held.Load() > 0 {
		t.kick()
	}
}

// Abort implements transport.Transport: everything pending and later
// fails with err, and every peer is told at once over its socket, so it
// fails naming this rank.
func (t *Transport) Abort(err error) {
	if err == nil {
		err = errors.New("no reason given")
	}
	err = fmt.Errorf("%w: %w", transport.ErrAborted, err)
	t.fail(err, nil)
	t.hangUp(fmt.Sprintf("rank %d aborted: %v", t.rank, err))
}

// FailLocal (transport.Capabilities.FailLocal): everything pending and later
// on this rank fails with err, as when a peer is lost, and no peer is told
// (they learn of the loss behind err themselves; this rank's goodbye at
// Close carries it).
func (t *Transport) FailLocal(err error) { t.fail(err, nil) }

// Failed is closed once the transport has failed
// (transport.Capabilities.Failed).
func (t *Transport) Failed() <-chan struct{} { return t.sticky.Failed() }

// Err implements transport.Transport.
func (t *Transport) Err() error { return t.sticky.Err() }

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats {
	return transport.Stats{BytesSent: t.sent.Load(), BytesRecv: t.recvd.Load(),
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecvd.Load()}
}

// peer is the connection to one other rank of the host.
type peer struct {
	t           *Transport
	rank        int
	pid         int // in this process's pid namespace; 0 if not visible
	conn        *net.UnixConn
	canPull     bool   // this rank may read the peer's memory
	pullsFromMe bool   // the peer reads this rank's: large sends are single-copy
	verdict     uint32 // why canPull is false (hello.go)

	remote                              []byte // the peer's inbox
	remoteSeq, remoteAwake, remoteClose *uint32
	theirSlots                          []byte // the peer's slot words for its sends to this rank

	// Receiving, under t.pollMu.
	in     inRing
	rd     reader
	broken bool // a protocol error ended the ring

	// Sending, under sendMu.
	sendMu   sync.Mutex
	out      outRing
	queue    []*outItem
	sendErr  error  // once set, sends to the peer fail with it
	outCut   bool   // a frame was left unfinished: no goodbye can follow
	mySlots  []byte // this rank's slot words for its sends to the peer
	slots    [rndvSlots]*rndvSend
	gens     [rndvSlots]uint32
	inFlight atomic.Int32 // slots in use
	queued   atomic.Bool  // the queue is not empty

	gone        error               // under t.mu: the peer closed (its goodbye was read)
	withdrawn   []transport.Claimed // under t.mu: receives whose offer the peer withdrew, failed with its goodbye (failWithdrawn)
	dead        atomic.Bool         // the peer was lost
	writerGone  atomic.Bool         // the peer closed with no goodbye in the ring: its head moves no more
	byeReceived atomic.Bool         // the ring's goodbye was read
}
