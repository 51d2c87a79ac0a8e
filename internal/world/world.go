// Package world is the machinery of communicators over one job
// transport: the state they share (the communicators by id, the job ranks
// lost under the per-peer failure model), the ids of derived
// communicators, the view of the job's transport a derived communicator
// runs over, the mapping of its ranks to the job's, and its revoked
// state. The public API's Comm holds these and keeps only the methods.
package world

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"
	"sync"

	"github.com/sparcml/sparcml/transport"
)

// Communicator ids. User communicators have id UserCommID; the library's
// own communicator of each (Comm.sys) has SysCommBit set as well, so its
// messages never match the user's.
const (
	UserCommID = 1
	SysCommBit = 1 << 30
)

// RevokeSeq is the sequence number of no operation: a fail-op of
// (communicator, RevokeSeq) tells every rank the communicator is revoked,
// and each rank keeps a receive of it posted to hear that.
const RevokeSeq = math.MaxUint64

// Member is a communicator as its World sees it.
type Member interface {
	// LocalRank is the member's rank of job rank j, or -1.
	LocalRank(j int) int
	// PeerLost revokes the member on this rank: job rank j, one of its
	// ranks, was lost with err.
	PeerLost(err error)
}

// World is what every communicator over one job transport shares: the
// transport and the communicators made from it, by id, so that a derived
// communicator's id is checked against those in use on this rank.
type World struct {
	t transport.Transport

	mu      sync.Mutex
	comms   map[uint32]Member
	lost    map[int]error // job ranks lost, in the per-peer model
	perPeer bool          // SPARCML_ON_PEER_LOSS=revoke: the survivors go on
}

// New is the world of the job transport t.
func New(t transport.Transport) *World {
	return &World{t: t, comms: make(map[uint32]Member), lost: make(map[int]error)}
}

// Transport is the job's transport.
func (w *World) Transport() transport.Transport { return w.t }

// Survives reports whether the job runs in the per-peer failure model.
func (w *World) Survives() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perPeer
}

// Survive switches the job to the per-peer failure model: the transport
// reports each lost peer to the world, which revokes the communicators
// it belonged to.
// survive is the transport's Capabilities.Survive.
func (w *World) Survive(survive func(lost func(peer int, err error))) {
	survive(w.peerLost)
	w.mu.Lock()
	w.perPeer = true
	w.mu.Unlock()
}

// Register records m under id; false if the id is taken.
func (w *World) Register(id uint32, m Member) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, taken := w.comms[id]; taken {
		return false
	}
	w.comms[id] = m
	return true
}

// Unregister forgets m (Close).
func (w *World) Unregister(id uint32, m Member) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comms[id] == m {
		delete(w.comms, id)
	}
}

// peerLost is the per-peer model's report of a lost job rank: every
// communicator that has it as a member is revoked on this rank.
func (w *World) peerLost(peer int, err error) {
	w.mu.Lock()
	w.lost[peer] = err
	var hit []Member
	for _, m := range w.comms {
		if m.LocalRank(peer) >= 0 {
			hit = append(hit, m)
		}
	}
	w.mu.Unlock()
	for _, m := range hit {
		m.PeerLost(err)
	}
}

// LostMember returns the error of a job rank of members already known
// lost, nil if none.
func (w *World) LostMember(members Members) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for j, err := range w.lost {
		if members.LocalRank(j) >= 0 {
			return err
		}
	}
	return nil
}

// FailedRanks returns the ranks of the communicator of members, other
// than self, sorted, that err says were lost (every PeerError it wraps),
// together with those this rank already knows lost (in the per-peer
// model).
func (w *World) FailedRanks(members Members, self int, err error) []int {
	var out []int
	add := func(job int) {
		if r := members.LocalRank(job); r >= 0 && r != self && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	walkErrors(err, func(e error) {
		if pe, ok := e.(*transport.PeerError); ok {
			add(pe.Peer)
		}
	})
	w.mu.Lock()
	for j := range w.lost {
		add(j)
	}
	w.mu.Unlock()
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

// Members maps a communicator's ranks to the job's: the job rank of each
// rank, in the communicator's order; nil for the job's own communicator.
type Members []int

// JobRank is the job rank of rank r.
func (m Members) JobRank(r int) int {
	if m == nil {
		return r
	}
	return m[r]
}

// LocalRank is the rank of job rank j, or -1 when j is not a member.
func (m Members) LocalRank(j int) int {
	if m == nil {
		return j
	}
	return slices.Index(m, j)
}

// DeriveID is the id of a communicator derived from parent by the
// operation what at sequence number seq of the parent's library
// communicator, with salt telling apart the communicators one operation
// makes: every rank computes the same id with no further messages. The
// id never has SysCommBit set and is never the job's own id.
func DeriveID(parent uint32, what string, seq, salt uint64) uint32 {
	h := fnv.New32a()
	var b [20]byte
	binary.LittleEndian.PutUint32(b[0:], parent)
	binary.LittleEndian.PutUint64(b[4:], seq)
	binary.LittleEndian.PutUint64(b[12:], salt)
	h.Write([]byte(what))
	h.Write(b[:])
	return h.Sum32()%(SysCommBit-2) + 2
}

// Revocation is a communicator's revoked state, and its count of Shrink
// calls.
type Revocation struct {
	mu      sync.Mutex
	cause   error
	shrinks uint64
}

// Err is why the communicator was revoked; nil if it was not.
func (r *Revocation) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// Set records cause unless one is set and reports whether it was first.
func (r *Revocation) Set(cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return false
	}
	r.cause = cause
	return true
}

// NextShrink counts a Shrink call and returns its number, from 1.
func (r *Revocation) NextShrink() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shrinks++
	return r.shrinks
}

// StopWatching ends a derived communicator's revocation watch (the
// receive of RevokeSeq) at Close, where this rank alone can fail the
// receive (else it stays posted until the job's transport closes: telling
// the other ranks would revoke their communicator while they may still
// finish an operation).
func StopWatching(t transport.Transport, comm uint32) {
	if f := Job(t).Caps().FailOpLocal; f != nil && t.Size() > 1 {
		f(comm, RevokeSeq, transport.ErrClosed)
	}
}
