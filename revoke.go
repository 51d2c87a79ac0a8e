package sparcml

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// ErrRevoked is wrapped by the error of every operation on a revoked
// communicator (Revoke, or a lost member under SPARCML_ON_PEER_LOSS=revoke).
var ErrRevoked = transport.ErrRevoked

// RevokedError is why a communicator was revoked: by the rank Rank (of
// that communicator) calling Revoke, or, when Rank is -1, because a
// member was lost (Cause is its PeerError, naming its job rank).
type RevokedError struct {
	Rank  int
	Cause error
}

func (e *RevokedError) Error() string {
	if e.Rank >= 0 {
		return fmt.Sprintf("%v by rank %d", ErrRevoked, e.Rank)
	}
	return fmt.Sprintf("%v: %v", ErrRevoked, e.Cause)
}

// Unwrap gives ErrRevoked and the cause (a lost peer) to errors.Is and As.
func (e *RevokedError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrRevoked}
	}
	return []error{ErrRevoked, e.Cause}
}

// revokeSeq is the sequence number of no operation: a fail-op of
// (communicator, revokeSeq) tells every rank the communicator is revoked,
// and each rank keeps a receive of it posted to hear that.
const revokeSeq = math.MaxUint64

// revocation is a communicator's revoked state.
type revocation struct {
	mu    sync.Mutex
	cause error
}

func (r *revocation) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// set records cause unless one is set and reports whether it was first.
func (r *revocation) set(cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return false
	}
	r.cause = cause
	return true
}

// Revoke fails every operation in flight on c on every rank, and every
// later one, with an error wrapping ErrRevoked (as ncclCommRevoke and
// MPI_Comm_revoke). The ranks are told through the job's connections, so
// it reaches ranks that are blocked in an operation waiting on a dead or
// stuck rank. It is not collective; it returns at once. A revoked
// communicator is still good for Shrink and Close.
func (c *Comm) Revoke() {
	if c == nil || c.closed.Load() {
		return
	}
	err := &RevokedError{Rank: c.Rank()}
	c.revokeLocal(err)
	if c.Size() > 1 {
		c.t.FailOp(c.id, revokeSeq, err)
	}
}

// revokeLocal revokes c on this rank: its operations in flight fail here
// (the peers learn of it themselves: from Revoke's message, or from the
// same lost peer).
func (c *Comm) revokeLocal(err error) {
	if !c.rev.set(err) {
		return
	}
	for _, x := range []*Comm{c, c.sys} {
		x.inflightMu.Lock()
		seqs := make([]uint64, 0, len(x.inflight))
		for s := range x.inflight {
			seqs = append(seqs, s)
		}
		x.inflightMu.Unlock()
		x.rev.set(err)
		for _, s := range seqs {
			failOpLocal(x.t, x.id, s, err)
		}
	}
	if c.log != nil {
		c.log.Warnf(logging.Coll, "communicator %d revoked: %v", c.id, err)
	}
}

// watchRevoke posts the receive that hears of a Revoke on another rank
// (a fail-op of revokeSeq fails every receive of it, from any peer).
func (c *Comm) watchRevoke() {
	if c.Size() < 2 {
		return
	}
	peer := (c.Rank() + 1) % c.Size()
	r := c.t.Recv(peer, transport.Tag{Comm: c.id, Seq: revokeSeq}, transport.Desc{Kind: transport.OpInternal}, nil)
	go func() {
		// Completion, not Done: the receive only ever fails, and Done
		// would make the TCP transport read in the background for it.
		<-r.Completion()
		var rf *transport.RemoteFailure
		if errors.As(r.Err(), &rf) && rf.Code == transport.CodeRevoked {
			c.revokeLocal(&RevokedError{Rank: c.localRank(rf.Peer)})
		}
	}()
}

// stopWatchingRevoke ends a derived communicator's revocation watch at
// Close, where this rank alone can fail the receive (else it stays
// posted until the job's transport closes: telling the other ranks would
// revoke their communicator while they may still finish an operation).
func (c *Comm) stopWatchingRevoke() {
	t := c.t
	if s, ok := t.(*subTransport); ok {
		t = s.root
	}
	if f := t.Caps().FailOpLocal; f != nil && c.Size() > 1 {
		f(c.id, revokeSeq, ErrClosed)
	}
}

// peerLost is the per-peer model's report of a lost job rank: every
// communicator that has it as a member is revoked on this rank.
func (w *world) peerLost(peer int, err error) {
	w.mu.Lock()
	w.lost[peer] = err
	var hit []*Comm
	for _, c := range w.comms {
		if c.localRank(peer) >= 0 && c.sys != nil {
			hit = append(hit, c)
		}
	}
	w.mu.Unlock()
	for _, c := range hit {
		c.revokeLocal(&RevokedError{Rank: -1, Cause: err})
	}
}

// lostMember returns the error of a member of c already known lost, nil
// if none.
func (w *world) lostMember(c *Comm) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for j, err := range w.lost {
		if c.localRank(j) >= 0 {
			return err
		}
	}
	return nil
}

// FailedRanks returns the ranks of c, in c's numbering and sorted, that
// err says were lost (every PeerError it wraps), together with those this
// rank already knows lost (under SPARCML_ON_PEER_LOSS=revoke): the set to
// pass to Shrink. It is empty for an error that involves no lost rank.
func (c *Comm) FailedRanks(err error) []int {
	var out []int
	add := func(job int) {
		if r := c.localRank(job); r >= 0 && r != c.Rank() && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	walkErrors(err, func(e error) {
		if pe, ok := e.(*transport.PeerError); ok {
			add(pe.Peer)
		}
	})
	c.world.mu.Lock()
	for j := range c.world.lost {
		add(j)
	}
	c.world.mu.Unlock()
	slices.Sort(out)
	return out
}

// walkErrors calls f on err and everything it wraps.
func walkErrors(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, f)
		}
	}
}
