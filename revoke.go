package sparcml

import (
	"errors"
	"fmt"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/world"
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

// Error says who revoked the communicator, or which member was lost.
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
		c.t.FailOp(c.id, world.RevokeSeq, err)
	}
}

// revokeLocal revokes c on this rank: its operations in flight fail here
// (the peers learn of it themselves: from Revoke's message, or from the
// same lost peer).
func (c *Comm) revokeLocal(err error) {
	if !c.rev.Set(err) {
		return
	}
	for _, x := range []*Comm{c, c.sys} {
		x.inflightMu.Lock()
		seqs := make([]uint64, 0, len(x.inflight))
		for s := range x.inflight {
			seqs = append(seqs, s)
		}
		x.inflightMu.Unlock()
		x.rev.Set(err)
		for _, s := range seqs {
			world.FailOpLocal(x.t, x.id, s, err)
		}
	}
	if c.log != nil {
		c.log.Warnf(logging.Coll, "communicator %d revoked: %v", c.id, err)
	}
}

// watchRevoke posts the receive that hears of a Revoke on another rank
// (a fail-op of world.RevokeSeq fails every receive of it, from any peer).
func (c *Comm) watchRevoke() {
	if c.Size() < 2 {
		return
	}
	peer := (c.Rank() + 1) % c.Size()
	r := c.t.Recv(peer, transport.Tag{Comm: c.id, Seq: world.RevokeSeq}, transport.Desc{Kind: transport.OpInternal}, nil)
	go func() {
		// Completion, not Done: the receive only ever fails, and Done
		// would make the TCP transport read in the background for it.
		<-r.Completion()
		var rf *transport.RemoteFailure
		if errors.As(r.Err(), &rf) && rf.Code == transport.CodeRevoked {
			c.revokeLocal(&RevokedError{Rank: c.members.LocalRank(rf.Peer)})
		}
	}()
}

// member is a Comm as its world sees it (world.Member), without
// exporting the methods from Comm.
type member Comm

// LocalRank is the communicator's rank of job rank j, or -1.
func (m *member) LocalRank(j int) int { return m.members.LocalRank(j) }

// PeerLost revokes the communicator on this rank: a member was lost.
func (m *member) PeerLost(err error) {
	(*Comm)(m).revokeLocal(&RevokedError{Rank: -1, Cause: err})
}

// FailedRanks returns the ranks of c, in c's numbering and sorted, that
// err says were lost (every PeerError it wraps), together with those this
// rank already knows lost (under SPARCML_ON_PEER_LOSS=revoke): the set to
// pass to Shrink. It is empty for an error that involves no lost rank.
func (c *Comm) FailedRanks(err error) []int {
	return c.world.FailedRanks(c.members, c.Rank(), err)
}
