package sparcml

import (
	"sync"

	"github.com/sparcml/sparcml/transport"
)

// world is what every communicator over one job transport shares: the
// transport and the communicators made from it, by id, so that a derived
// communicator's id is checked against those in use on this rank.
type world struct {
	t transport.Transport

	mu      sync.Mutex
	comms   map[uint32]*Comm
	lost    map[int]error // job ranks lost, in the per-peer model
	perPeer bool          // SPARCML_ON_PEER_LOSS=revoke: the survivors go on
}

// survives reports whether the job runs in the per-peer failure model.
func (w *world) survives() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perPeer
}

func newWorld(t transport.Transport) *world {
	return &world{t: t, comms: make(map[uint32]*Comm), lost: make(map[int]error)}
}

// register records c under its id; false if the id is taken.
func (w *world) register(c *Comm) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, taken := w.comms[c.id]; taken {
		return false
	}
	w.comms[c.id] = c
	return true
}

// unregister forgets c (Close).
func (w *world) unregister(c *Comm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comms[c.id] == c {
		delete(w.comms, c.id)
	}
}

// jobRank is the job rank of c's rank r.
func (c *Comm) jobRank(r int) int {
	if c.members == nil {
		return r
	}
	return c.members[r]
}

// localRank is c's rank of job rank j, or -1 when j is not a member.
func (c *Comm) localRank(j int) int {
	if c.members == nil {
		return j
	}
	for r, m := range c.members {
		if m == j {
			return r
		}
	}
	return -1
}
