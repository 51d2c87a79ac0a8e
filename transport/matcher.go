package transport

import (
	"context"
	"errors"
	"sync"
)

// Matcher pairs incoming messages with posted receives by (peer, Tag). It is
// the part of receiving that every transport shares: a stream transport asks
// Claim where to put a payload before reading it, so a message whose
// receive is already posted lands in the caller's buffer with no copy;
// anything else waits as an unexpected message, within a per-peer byte
// budget that blocks the reader (back-pressure) rather than buffering
// without bound.
type Matcher struct {
	rank  int
	limit int64 // per-peer budget for unexpected bytes; 0 means unlimited

	mu         sync.Mutex
	space      *sync.Cond
	posted     map[mkey]posted
	unexpected map[mkey]*message
	unexpBytes map[int]int64
	claimed    map[*Request]struct{}
	failed     map[opKey]error
	failedFIFO []opKey
	gone       map[int]error // peers that closed gracefully
	opKind     map[opKey]OpKind
	opKindFIFO []opKey
	err        error
}

type mkey struct {
	peer int
	tag  Tag
}

type opKey struct {
	comm uint32
	seq  uint64
}

type posted struct {
	req  *Request
	desc Desc
	buf  []byte
}

type message struct {
	desc Desc
	data []byte
}

// maxFailedOps bounds how many failed operations are remembered, so late
// messages of a failed operation are discarded instead of piling up.
const maxFailedOps = 4096

// NewMatcher returns a matcher for rank with a per-peer budget of limit
// bytes of unexpected messages (0: unlimited). A single message larger than
// the budget is still accepted when nothing else from that peer waits.
func NewMatcher(rank int, limit int64) *Matcher {
	m := &Matcher{
		rank:       rank,
		limit:      limit,
		posted:     make(map[mkey]posted),
		unexpected: make(map[mkey]*message),
		unexpBytes: make(map[int]int64),
		claimed:    make(map[*Request]struct{}),
		failed:     make(map[opKey]error),
		gone:       make(map[int]error),
		opKind:     make(map[opKey]OpKind),
	}
	m.space = sync.NewCond(&m.mu)
	return m
}

// Post registers a receive. If the message already arrived it completes at
// once, copied into buf when buf has the capacity.
func (m *Matcher) Post(peer int, tag Tag, desc Desc, buf []byte) *Request {
	req := NewRequest(peer, tag, false)
	k := mkey{peer, tag}
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		req.Complete(nil, m.err)
		return req
	}
	if err, ok := m.failed[opKey{tag.Comm, tag.Seq}]; ok {
		m.mu.Unlock()
		req.Complete(nil, err)
		return req
	}
	if bad, peerOf, ok := m.recordKind(tag, desc); !ok {
		m.mu.Unlock()
		req.Complete(nil, m.mismatch(peerOf, tag, desc, bad))
		return req
	}
	msg, ok := m.unexpected[k]
	if err, gone := m.gone[peer]; gone && !ok {
		m.mu.Unlock()
		req.Complete(nil, err)
		return req
	}
	if ok {
		delete(m.unexpected, k)
		m.release(peer, int64(len(msg.data)))
		m.mu.Unlock()
		if msg.desc != desc {
			req.Complete(nil, m.mismatch(peer, tag, desc, msg.desc))
			PutBuf(msg.data)
			return req
		}
		data := msg.data
		if cap(buf) >= len(data) {
			data = buf[:len(data)]
			copy(data, msg.data)
			PutBuf(msg.data)
		}
		req.Complete(data, nil)
		return req
	}
	if _, dup := m.posted[k]; dup {
		m.mu.Unlock()
		req.Complete(nil, &Error{Rank: m.rank, Peer: peer, Op: desc.Kind.String(), Seq: tag.Seq, Step: tag.Step,
			Err: errorf(ErrInvalid, "a receive with this tag is already posted")})
		return req
	}
	m.posted[k] = posted{req: req, desc: desc, buf: buf}
	// A reader may be blocked in Claim on the budget while holding the
	// header of exactly this message: wake it so it can deliver.
	m.space.Broadcast()
	m.mu.Unlock()
	return req
}

// recordKind remembers which collective this rank runs at (comm, seq) and
// checks the messages already waiting for that operation: a peer running
// another collective at the same sequence number may send at steps this
// rank never posts, so comparing descriptors only message by message could
// miss it and leave both sides waiting. Returns ok false with the first
// conflicting message's descriptor and sender. Called with m.mu held.
func (m *Matcher) recordKind(tag Tag, desc Desc) (bad Desc, peer int, ok bool) {
	if desc.Kind == OpP2P {
		// Every message of a point-to-point operation is one send of
		// one kind, checked by its descriptor alone: no record needed
		// (saving a map insert and delete per message).
		return Desc{}, 0, true
	}
	op := opKey{tag.Comm, tag.Seq}
	if _, known := m.opKind[op]; known {
		// Messages of this operation were checked by Claim as they
		// arrived (the kind was known then): no scan on the hot path.
		return Desc{}, 0, true
	}
	m.opKind[op] = desc.Kind
	m.opKindFIFO = append(m.opKindFIFO, op)
	if len(m.opKindFIFO) > maxFailedOps {
		delete(m.opKind, m.opKindFIFO[0])
		m.opKindFIFO = m.opKindFIFO[1:]
	}
	// First receive of the operation: check what arrived before it.
	for k, msg := range m.unexpected {
		if k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq && desc.Kind != msg.desc.Kind {
			return msg.desc, k.peer, false
		}
	}
	return Desc{}, 0, true
}

// kindOf returns the kind recordKind recorded for tag's operation; a
// point-to-point message is not looked up (recordKind records none).
// Called with m.mu held.
func (m *Matcher) kindOf(tag Tag, desc Desc) (OpKind, bool) {
	if desc.Kind == OpP2P {
		return 0, false
	}
	kind, known := m.opKind[opKey{tag.Comm, tag.Seq}]
	return kind, known
}

// failKindMismatch fails every posted receive of the operation a message
// of another collective kind arrived for. Called with m.mu held.
func (m *Matcher) failKindMismatch(peer int, tag Tag, remote Desc) {
	for k, p := range m.posted {
		if k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq {
			delete(m.posted, k)
			p.req.Complete(nil, m.mismatch(peer, tag, p.desc, remote))
		}
	}
}

func (m *Matcher) mismatch(peer int, tag Tag, local, remote Desc) error {
	return &MismatchError{Tag: tag, Local: local, Peer: peer, Remote: remote, Rank: m.rank}
}

// Claimed is where the payload of a message goes and how it completes,
// as Claim decided: a value, so that delivering a message allocates no
// closure.
type Claimed struct {
	m        *Matcher
	dst      []byte
	req      *Request // a posted receive it completes
	unexp    bool     // or an unexpected message, filed under k
	k        mkey
	desc     Desc
	mismatch bool // the message is of another kind than its operation
}

// Dst is where to read the payload; nil means read and discard it
// (unless the payload is empty).
func (c *Claimed) Dst() []byte { return c.dst }

// KindMismatch reports that the message belongs to an operation this rank
// runs as another kind (see CheckKind): its posted receives have failed,
// and the message is discarded (Dst is nil).
func (c *Claimed) KindMismatch() bool { return c.mismatch }

// Finish completes the message once its payload is in Dst (or skipped).
func (c *Claimed) Finish() {
	switch {
	case c.req != nil:
		c.m.finishClaim(c.req, c.dst)
	case c.unexp:
		c.m.finishUnexpected(c.k, c.desc, c.dst)
	}
}

// Fail ends a claimed message whose payload will not come after all (its
// sender closed before sending it): its receive fails with err, or the
// unexpected message is dropped.
func (c *Claimed) Fail(err error) {
	switch {
	case c.req != nil:
		c.m.mu.Lock()
		delete(c.m.claimed, c.req)
		c.m.mu.Unlock()
		c.req.Complete(nil, err)
	case c.unexp:
		c.m.mu.Lock()
		c.m.release(c.k.peer, int64(len(c.dst)))
		c.m.mu.Unlock()
		PutBuf(c.dst)
	}
}

// CheckKind is the per-operation kind check of Claim for a message
// announced before its payload is claimed (a rendezvous request): if this
// rank runs the message's operation as another kind, the operation's
// posted receives fail with a mismatch and CheckKind reports true; the
// transport then drops the message and fails the receives it took out of
// matching (a buffer offered to the sender) itself.
func (m *Matcher) CheckKind(peer int, tag Tag, desc Desc) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kindMismatchLocked(peer, tag, desc)
}

// kindMismatchLocked fails the operation's posted receives and reports
// true when a message of desc's kind arrives for an operation this rank
// runs as another kind. Called with m.mu held.
func (m *Matcher) kindMismatchLocked(peer int, tag Tag, desc Desc) bool {
	kind, known := m.kindOf(tag, desc)
	if !known || kind == desc.Kind {
		return false
	}
	m.failKindMismatch(peer, tag, desc)
	return true
}

// Claim is called by a transport when the header of a message of n payload
// bytes from peer has arrived. It returns where to read the payload and,
// through Finish, how to complete the message once read. It blocks while
// the peer's unexpected budget is exhausted, and returns the matcher's
// error once it has failed.
func (m *Matcher) Claim(peer int, tag Tag, desc Desc, n int) (Claimed, error) {
	return m.claim(context.Background(), peer, tag, desc, n, true)
}

// TryClaim is Claim without the blocking: where Claim would wait for the
// peer's unexpected budget it returns ErrNoBudget, and the message stays
// unclaimed. It is for a caller that reads on its own behalf and must not
// wait for other operations (see the TCP transport).
func (m *Matcher) TryClaim(peer int, tag Tag, desc Desc, n int) (Claimed, error) {
	return m.claim(context.Background(), peer, tag, desc, n, false)
}

// ClaimContext is Claim that gives up, with ctx's error, when ctx ends
// while it waits for the budget: for a sender that holds a message back
// and must let go of it when it closes.
func (m *Matcher) ClaimContext(ctx context.Context, peer int, tag Tag, desc Desc, n int) (Claimed, error) {
	if ctx.Done() == nil {
		return m.claim(ctx, peer, tag, desc, n, true)
	}
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.space.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	return m.claim(ctx, peer, tag, desc, n, true)
}

// ErrNoBudget is TryClaim's answer when the unexpected budget is full.
var ErrNoBudget = errors.New("unexpected-message budget exhausted")

func (m *Matcher) claim(ctx context.Context, peer int, tag Tag, desc Desc, n int, block bool) (Claimed, error) {
	k := mkey{peer, tag}
	discard := Claimed{m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.err != nil {
			return Claimed{}, m.err
		}
		if err := ctx.Err(); err != nil {
			return Claimed{}, err
		}
		if _, ok := m.failed[opKey{tag.Comm, tag.Seq}]; ok {
			return discard, nil
		}
		if m.kindMismatchLocked(peer, tag, desc) {
			return Claimed{m: m, mismatch: true}, nil
		}
		if p, ok := m.posted[k]; ok {
			delete(m.posted, k)
			return m.takeLocked(p, peer, tag, desc, n), nil
		}
		if _, dup := m.unexpected[k]; dup {
			return Claimed{}, errorf(ErrProtocol, "rank %d sent two messages with %v", peer, tag)
		}
		used := m.unexpBytes[peer]
		if m.limit == 0 || used == 0 || used+int64(n) <= m.limit {
			m.unexpBytes[peer] = used + int64(n)
			return Claimed{m: m, dst: GetBuf(n), unexp: true, k: k, desc: desc}, nil
		}
		if !block {
			return Claimed{}, ErrNoBudget
		}
		m.space.Wait()
	}
}

func (m *Matcher) finishClaim(req *Request, buf []byte) {
	m.mu.Lock()
	delete(m.claimed, req)
	m.mu.Unlock()
	req.Complete(buf, nil)
}

// finishUnexpected files a fully read unexpected message, unless a receive
// was posted for it while it was being read.
func (m *Matcher) finishUnexpected(k mkey, desc Desc, buf []byte) {
	m.mu.Lock()
	if m.err != nil {
		m.release(k.peer, int64(len(buf)))
		m.mu.Unlock()
		return
	}
	if _, ok := m.failed[opKey{k.tag.Comm, k.tag.Seq}]; ok {
		m.release(k.peer, int64(len(buf)))
		m.mu.Unlock()
		PutBuf(buf)
		return
	}
	if p, ok := m.posted[k]; ok {
		delete(m.posted, k)
		m.release(k.peer, int64(len(buf)))
		m.mu.Unlock()
		if p.desc != desc {
			p.req.Complete(nil, m.mismatch(k.peer, k.tag, p.desc, desc))
			PutBuf(buf)
			return
		}
		data := buf
		if cap(p.buf) >= len(buf) {
			data = p.buf[:len(buf)]
			copy(data, buf)
			PutBuf(buf)
		}
		p.req.Complete(data, nil)
		return
	}
	m.unexpected[k] = &message{desc: desc, data: buf}
	m.mu.Unlock()
}

// takeLocked gives the message (peer, tag, desc) of n payload bytes to the
// posted receive p, which is out of matching: into p's buffer, a larger
// one if the message does not fit, or nowhere when the descriptors differ.
// Called with m.mu held.
func (m *Matcher) takeLocked(p posted, peer int, tag Tag, desc Desc, n int) Claimed {
	if p.desc != desc {
		p.req.Complete(nil, m.mismatch(peer, tag, p.desc, desc))
		return Claimed{m: m}
	}
	buf := p.buf
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	m.claimed[p.req] = struct{}{}
	return Claimed{m: m, dst: buf[:n], req: p.req}
}

func (m *Matcher) release(peer int, n int64) {
	m.unexpBytes[peer] -= n
	m.space.Broadcast()
}

// FailOp fails every posted receive of operation (comm, seq), drops its
// unexpected messages and discards its later messages.
func (m *Matcher) FailOp(comm uint32, seq uint64, err error) {
	ok := opKey{comm, seq}
	var fail []*Request
	m.mu.Lock()
	if _, seen := m.failed[ok]; !seen {
		m.failed[ok] = err
		m.failedFIFO = append(m.failedFIFO, ok)
		if len(m.failedFIFO) > maxFailedOps {
			delete(m.failed, m.failedFIFO[0])
			m.failedFIFO = m.failedFIFO[1:]
		}
	}
	for k, p := range m.posted {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			fail = append(fail, p.req)
			delete(m.posted, k)
		}
	}
	for k, msg := range m.unexpected {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			m.release(k.peer, int64(len(msg.data)))
			delete(m.unexpected, k)
		}
	}
	// Receives whose payload is being read right now are left to finish:
	// failing them would let the caller reuse a buffer the reader is still
	// writing into.
	m.mu.Unlock()
	for _, r := range fail {
		r.Complete(nil, err)
	}
}

// FailPeer is for a peer that closed its connection gracefully: receives
// from it that are posted now or later fail with err (messages it sent
// before closing are still delivered), while operations that do not involve
// it go on. A peer that dies without saying goodbye is a matter for Abort.
func (m *Matcher) FailPeer(peer int, err error) {
	var fail []*Request
	m.mu.Lock()
	if _, seen := m.gone[peer]; !seen {
		m.gone[peer] = err
	}
	for k, p := range m.posted {
		if k.peer == peer {
			fail = append(fail, p.req)
			delete(m.posted, k)
		}
	}
	m.mu.Unlock()
	for _, r := range fail {
		r.Complete(nil, err)
	}
}

// Abort fails everything pending and later with err. The first error wins.
// A transport must stop its readers before calling Abort (or call it from
// the reader itself), since receives being read into are failed too.
func (m *Matcher) Abort(err error) {
	var fail []*Request
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	err = m.err
	for k, p := range m.posted {
		fail = append(fail, p.req)
		delete(m.posted, k)
	}
	for r := range m.claimed {
		fail = append(fail, r)
	}
	for k := range m.unexpected {
		delete(m.unexpected, k)
	}
	clear(m.unexpBytes)
	m.space.Broadcast()
	m.mu.Unlock()
	for _, r := range fail {
		r.Complete(nil, err)
	}
}

// Err returns the error the matcher was aborted with, or nil.
func (m *Matcher) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Pending returns the number of posted receives and unexpected messages,
// for tests and leak checks.
func (m *Matcher) Pending() (posted, unexpected int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.posted), len(m.unexpected)
}
