package transport

import (
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
	reserved   map[mkey]*reservation
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

// reservation is a posted receive taken out of matching for a speculative
// read (Reserve); err is why it must fail once the read is over.
type reservation struct {
	posted
	err error
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
		reserved:   make(map[mkey]*reservation),
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
		if k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq && !compatibleKinds(desc.Kind, msg.desc.Kind) {
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
	m.failReservedLocked(func(k mkey) bool { return k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq },
		func(r *reservation) error { return m.mismatch(peer, tag, r.desc, remote) })
}

// failReservedLocked marks the reserved receives that match to fail with
// err(r) when their speculative read ends: the reader may be writing into
// their buffers now. Called with m.mu held.
func (m *Matcher) failReservedLocked(match func(k mkey) bool, err func(r *reservation) error) {
	for k, r := range m.reserved {
		if r.err == nil && match(k) {
			r.err = err(r)
		}
	}
}

// compatibleKinds: a sparse allreduce may finish as a dense allreduce (the
// dense end of the sparse-to-dense switch); every other pair must match.
func compatibleKinds(a, b OpKind) bool {
	if a == b {
		return true
	}
	sparseDense := func(x, y OpKind) bool { return x == OpSparseAllreduce && y == OpAllreduce }
	return sparseDense(a, b) || sparseDense(b, a)
}

func (m *Matcher) mismatch(peer int, tag Tag, local, remote Desc) error {
	return &MismatchError{Tag: tag, Local: local, Peer: peer, Remote: remote, Rank: m.rank}
}

// Claimed is where the payload of a message goes and how it completes,
// as Claim decided: a value, so that delivering a message allocates no
// closure.
type Claimed struct {
	m     *Matcher
	dst   []byte
	req   *Request // a posted receive it completes
	unexp bool     // or an unexpected message, filed under k
	k     mkey
	desc  Desc
}

// Dst is where to read the payload; nil means read and discard it
// (unless the payload is empty).
func (c *Claimed) Dst() []byte { return c.dst }

// Finish completes the message once its payload is in Dst (or skipped).
func (c *Claimed) Finish() {
	switch {
	case c.req != nil:
		c.m.finishClaim(c.req, c.dst)
	case c.unexp:
		c.m.finishUnexpected(c.k, c.desc, c.dst)
	}
}

// Claim is called by a transport when the header of a message of n payload
// bytes from peer has arrived. It returns where to read the payload and,
// through Finish, how to complete the message once read. It blocks while
// the peer's unexpected budget is exhausted, and returns the matcher's
// error once it has failed.
func (m *Matcher) Claim(peer int, tag Tag, desc Desc, n int) (Claimed, error) {
	return m.claim(peer, tag, desc, n, true)
}

// TryClaim is Claim without the blocking: where Claim would wait for the
// peer's unexpected budget it returns ErrNoBudget, and the message stays
// unclaimed. It is for a caller that reads on its own behalf and must not
// wait for other operations (see the TCP transport).
func (m *Matcher) TryClaim(peer int, tag Tag, desc Desc, n int) (Claimed, error) {
	return m.claim(peer, tag, desc, n, false)
}

// ErrNoBudget is TryClaim's answer when the unexpected budget is full.
var ErrNoBudget = errors.New("unexpected-message budget exhausted")

func (m *Matcher) claim(peer int, tag Tag, desc Desc, n int, block bool) (Claimed, error) {
	k := mkey{peer, tag}
	discard := Claimed{m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.err != nil {
			return Claimed{}, m.err
		}
		if _, ok := m.failed[opKey{tag.Comm, tag.Seq}]; ok {
			return discard, nil
		}
		if kind, known := m.kindOf(tag, desc); known && !compatibleKinds(kind, desc.Kind) {
			m.failKindMismatch(peer, tag, desc)
			return discard, nil
		}
		if p, ok := m.posted[k]; ok {
			delete(m.posted, k)
			return m.takeLocked(p, peer, tag, desc, n, 0, nil), nil
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

// Speculative reads.
//
// A stream transport whose caller waits for one receive may read the next
// frame with one system call into a header buffer, that receive's buffer
// and its read buffer, betting that the frame is that receive's message:
// a round trip then costs one read and no copy instead of two reads and a
// copy. Reserve takes the receive out of matching for the bet, so that
// nothing else fills or fails it while the reader may be writing into its
// buffer: FailOp, FailPeer and a collective mismatch only mark it, and
// Abort fails it as it fails a claimed one (after the transport has
// stopped its readers). The bet ends with ClaimReserved when the frame is
// the receive's message, Unreserve when it is not.

// Reserve takes the posted receive (peer, tag) out of matching and returns
// its buffer, if it is posted and its buffer holds at least min bytes.
func (m *Matcher) Reserve(peer int, tag Tag, min int) ([]byte, bool) {
	k := mkey{peer, tag}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.posted[k]
	if !ok || len(p.buf) < min || m.err != nil {
		return nil, false
	}
	delete(m.posted, k)
	m.reserved[k] = &reservation{posted: p}
	m.claimed[p.req] = struct{}{}
	return p.buf, true
}

// Unreserve ends a reservation whose frame was another: the receive is
// posted again, or fails if it was marked to meanwhile.
func (m *Matcher) Unreserve(peer int, tag Tag) {
	k := mkey{peer, tag}
	m.mu.Lock()
	r, ok := m.reserved[k]
	if !ok {
		m.mu.Unlock()
		return
	}
	delete(m.reserved, k)
	delete(m.claimed, r.req)
	err := r.err
	if err == nil && m.err == nil {
		m.posted[k] = r.posted
		// As in Post: a reader blocked on the budget may hold its message.
		m.space.Broadcast()
	}
	m.mu.Unlock()
	if err != nil {
		r.req.Complete(nil, err)
	}
}

// ClaimReserved is Claim for the reserved receive's own message, of n
// payload bytes of which the first landed are already at the start of
// the receive's buffer. The message goes where Claim would send it: into
// that buffer (the landed bytes in place), into a larger one if it does
// not fit (the landed bytes copied), or nowhere if the receive was marked
// to fail or the message does not match it.
func (m *Matcher) ClaimReserved(peer int, tag Tag, desc Desc, n, landed int) (Claimed, error) {
	k := mkey{peer, tag}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reserved[k]
	if !ok {
		return Claimed{}, errorf(ErrProtocol, "no reservation for %v from rank %d", tag, peer)
	}
	delete(m.reserved, k)
	if m.err != nil {
		return Claimed{}, m.err // Abort failed the receive already
	}
	fail := r.err
	if kind, known := m.kindOf(tag, desc); fail == nil && known && !compatibleKinds(kind, desc.Kind) {
		m.failKindMismatch(peer, tag, desc)
		fail = m.mismatch(peer, tag, r.desc, desc)
	}
	return m.takeLocked(r.posted, peer, tag, desc, n, landed, fail), nil
}

// takeLocked gives the message (peer, tag, desc) of n payload bytes, the
// first landed of them already at the start of its buffer, to the receive
// p, which is out of matching: into p's buffer, a larger one if the
// message does not fit (the landed bytes copied), or nowhere when p fails
// with fail or with a mismatch of the descriptors. Called with m.mu held.
func (m *Matcher) takeLocked(p posted, peer int, tag Tag, desc Desc, n, landed int, fail error) Claimed {
	if fail == nil && p.desc != desc {
		fail = m.mismatch(peer, tag, p.desc, desc)
	}
	if fail != nil {
		delete(m.claimed, p.req) // reserved receives are in it
		p.req.Complete(nil, fail)
		return Claimed{m: m}
	}
	buf := p.buf
	if cap(buf) < n {
		buf = make([]byte, n)
		copy(buf, p.buf[:landed])
	}
	m.claimed[p.req] = struct{}{}
	return Claimed{m: m, dst: buf[:n], req: p.req}
}

// Deliver files a whole message whose payload is already in memory (for
// transports that receive into their own buffers). data is copied.
func (m *Matcher) Deliver(peer int, tag Tag, desc Desc, data []byte) error {
	c, err := m.Claim(peer, tag, desc, len(data))
	if err != nil {
		return err
	}
	copy(c.Dst(), data)
	c.Finish()
	return nil
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
	m.failReservedLocked(func(k mkey) bool { return k.tag.Comm == comm && k.tag.Seq == seq },
		func(*reservation) error { return err })
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
	m.failReservedLocked(func(k mkey) bool { return k.peer == peer }, func(*reservation) error { return err })
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
	return len(m.posted) + len(m.reserved), len(m.unexpected)
}
