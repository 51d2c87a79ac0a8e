package transport

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// routePoll is how often a Route looks at the Err of a transport that is
// reports no Failed channel.
const routePoll = 100 * time.Millisecond

// Route is one Transport over several: each peer is reached through one
// of them (shared memory for the ranks of this host, TCP or RDMA for the
// others). Send and Recv go to the peer's transport; FailOp, Abort and
// Close go to all of them; Stats adds them up (Parts gives each one's).
// When one of them fails (a lost peer), Route fails the others on this
// rank too, with the same error prefixed by the failed transport's name,
// so that every pending and later request fails, as on a single
// transport: through FailLocal where a transport has it (Capabilities),
// otherwise by Abort (whose peers then see this rank lost).
//
// The matchers stay separate: a message of another collective kind that
// reaches one transport fails only the receives of its operation posted
// on that transport; the layer above then fails the operation everywhere
// (FailOp).
type Route struct {
	rank, size int
	parts      []Transport
	via        []Transport // by peer; nil for this rank
	name       string
	caps       Capabilities // Caps, made once (see Capabilities)

	mu      sync.Mutex
	err     error
	closing bool
	failed  chan struct{} // closed when err is set

	stopWatch chan struct{}
	watchers  sync.WaitGroup
	closeOnce sync.Once
}

var _ Transport = (*Route)(nil)

// NewRoute returns the transport that reaches peer p through
// parts[via[p]]. Every part must have the same Rank and Size; via has an
// entry for every rank of the job, this rank's ignored. The Route owns the
// parts: its Close closes them.
func NewRoute(parts []Transport, via []int) (*Route, error) {
	if len(parts) == 0 {
		return nil, errorf(ErrInvalid, "route: no transports")
	}
	rank, size := parts[0].Rank(), parts[0].Size()
	names := make([]string, len(parts))
	for i, p := range parts {
		if p.Rank() != rank || p.Size() != size {
			return nil, errorf(ErrInvalid, "route: %s is rank %d of %d, %s rank %d of %d",
				p.Name(), p.Rank(), p.Size(), parts[0].Name(), rank, size)
		}
		names[i] = p.Name()
	}
	if len(via) != size {
		return nil, errorf(ErrInvalid, "route: %d routes for a job of %d ranks", len(via), size)
	}
	r := &Route{rank: rank, size: size, parts: parts, via: make([]Transport, size), failed: make(chan struct{}),
		name: strings.Join(names, "+"), stopWatch: make(chan struct{})}
	for peer, i := range via {
		if peer == rank {
			continue
		}
		if i < 0 || i >= len(parts) {
			return nil, errorf(ErrInvalid, "route: rank %d routed to transport %d of %d", peer, i, len(parts))
		}
		r.via[peer] = parts[i]
	}
	r.caps = Capabilities{SegmentBytes: segmentBytes(parts), Failed: r.failed, FailLocal: r.FailLocal}
	for _, p := range parts {
		r.watchers.Add(1)
		go r.watch(p)
	}
	return r, nil
}

// Name implements Transport: the parts' names joined by "+".
func (r *Route) Name() string { return r.name }

// Rank implements Transport.
func (r *Route) Rank() int { return r.rank }

// Size implements Transport.
func (r *Route) Size() int { return r.size }

// Caps implements Transport: a Route can be watched and failed on this
// rank alone, whatever its parts can; its segment size is the parts'
// where they all have the same one, else none (a flat algorithm's
// segments cross every part). A lost peer is sticky on a Route, and an
// operation fails on every rank (no Survive, no FailOpLocal).
func (r *Route) Caps() Capabilities { return r.caps }

// segmentBytes is the segment size the parts agree on, 0 if they differ.
func segmentBytes(parts []Transport) int {
	seg := parts[0].Caps().SegmentBytes
	for _, p := range parts[1:] {
		if p.Caps().SegmentBytes != seg {
			return 0
		}
	}
	return seg
}

// Parts returns the transports, in the order given to NewRoute.
func (r *Route) Parts() []Transport { return append([]Transport(nil), r.parts...) }

// Via returns the transport that reaches peer (nil for this rank or a
// rank out of range).
func (r *Route) Via(peer int) Transport {
	if peer < 0 || peer >= r.size {
		return nil
	}
	return r.via[peer]
}

func (r *Route) checkPeer(peer int) error {
	if peer < 0 || peer >= r.size || peer == r.rank {
		return errorf(ErrInvalid, "route: rank %d: peer %d out of range [0,%d) or self", r.rank, peer, r.size)
	}
	return nil
}

// Send implements Transport through the peer's transport.
func (r *Route) Send(peer int, tag Tag, desc Desc, bufs ...[]byte) *Request {
	if err := r.checkPeer(peer); err != nil {
		return Failed(peer, tag, true, err)
	}
	return r.via[peer].Send(peer, tag, desc, bufs...)
}

// Recv implements Transport through the peer's transport.
func (r *Route) Recv(peer int, tag Tag, desc Desc, buf []byte) *Request {
	if err := r.checkPeer(peer); err != nil {
		return Failed(peer, tag, false, err)
	}
	return r.via[peer].Recv(peer, tag, desc, buf)
}

// FailOp implements Transport: every part fails the operation and tells
// its peers.
func (r *Route) FailOp(comm uint32, seq uint64, err error) {
	for _, p := range r.parts {
		p.FailOp(comm, seq, err)
	}
}

// Abort implements Transport: every part aborts.
func (r *Route) Abort(err error) {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	for _, p := range r.parts {
		p.Abort(err)
	}
	r.setErr(r.parts[0].Err())
}

// FailLocal (Capabilities.FailLocal): every part fails on this rank
// alone where it can (FailLocal), else aborts; the parts' goodbyes at
// Close carry err.
func (r *Route) FailLocal(err error) {
	if !r.setErr(err) {
		return
	}
	for _, p := range r.parts {
		failLocal(p, err)
	}
}

// Failed is closed once a part has failed or the route was failed
// (Capabilities.Failed).
func (r *Route) Failed() <-chan struct{} { return r.failed }

// Err implements Transport: the first failure of a part, named by it.
func (r *Route) Err() error {
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return err
	}
	for _, p := range r.parts {
		if err := p.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r *Route) setErr(err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || err == nil {
		return false
	}
	r.err = err
	close(r.failed)
	return true
}

// Stats implements Transport: the parts' counters added up.
func (r *Route) Stats() Stats {
	var s Stats
	for _, p := range r.parts {
		ps := p.Stats()
		s.BytesSent += ps.BytesSent
		s.BytesRecv += ps.BytesRecv
		s.MsgsSent += ps.MsgsSent
		s.MsgsRecv += ps.MsgsRecv
	}
	return s
}

// Close implements Transport: every part closes, at once.
func (r *Route) Close() error {
	var errs []error
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closing = true
		r.mu.Unlock()
		close(r.stopWatch)
		errs = make([]error, len(r.parts))
		var wg sync.WaitGroup
		for i, p := range r.parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = p.Close()
			}()
		}
		wg.Wait()
		r.watchers.Wait()
		r.setErr(ErrClosed)
	})
	return errors.Join(errs...)
}

// watch waits for part to fail and fails the other parts.
func (r *Route) watch(part Transport) {
	defer r.watchers.Done()
	if failed := part.Caps().Failed; failed != nil {
		select {
		case <-failed:
		case <-r.stopWatch:
			return
		}
	} else {
		tick := time.NewTicker(routePoll)
		defer tick.Stop()
		for part.Err() == nil {
			select {
			case <-tick.C:
			case <-r.stopWatch:
				return
			}
		}
	}
	r.spread(part, part.Err())
}

// spread fails every part but from with from's error, named by from.
func (r *Route) spread(from Transport, err error) {
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if closing || err == nil || errors.Is(err, ErrClosed) {
		return
	}
	err = fmt.Errorf("%s: %w", from.Name(), err)
	if !r.setErr(err) {
		return
	}
	for _, p := range r.parts {
		if p == from {
			continue
		}
		failLocal(p, err)
	}
}

// failLocal fails p on this rank alone where it can, else aborts it.
func failLocal(p Transport, err error) {
	if f := p.Caps().FailLocal; f != nil {
		f(err)
		return
	}
	p.Abort(err)
}
