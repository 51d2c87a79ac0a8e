package fallback

import (
	"github.com/sparcml/sparcml/internal/logging"
)

// Survive (transport.Capabilities.Survive): from now on a lost peer fails
// only what involves it, and lost is called once for it.
func (t *Transport) Survive(lost func(peer int, err error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onLost = lost
	t.lostPeer = make(map[int]error)
}

// failPeer is what a broken connection to peer does: in the per-peer
// model, lose that peer only; otherwise fail the transport.
func (t *Transport) failPeer(err error, peer int) {
	if !t.losePeer(peer, err) {
		t.fail(err, peer)
	}
}

// losePeer handles the loss of peer in the per-peer model and reports
// whether it did (false: the model is sticky, or the transport is
// stopping). The peer's connections close, its queued and later sends
// fail, and its receives fail once no reader is writing into a receive
// buffer (as abortMatcher, for the same reason).
func (t *Transport) losePeer(peer int, err error) bool {
	t.mu.Lock()
	cb := t.onLost
	if cb == nil || t.sticky.Err() != nil {
		t.mu.Unlock()
		return false
	}
	if _, seen := t.lostPeer[peer]; seen {
		t.mu.Unlock()
		return true
	}
	t.lostPeer[peer] = err
	t.mu.Unlock()
	t.cfg.Log.Warnf(logging.TCP, "lost rank %d, going on with the others: %v", peer, err)
	for _, c := range t.peers[peer] {
		c.q.close(err)
		c.broken.Store(true) // no goodbye to a dead peer
		_ = c.nc.Close()
		c.kick()
	}
	t.aborters.Add(1)
	go func() {
		defer t.aborters.Done()
		t.waitNoFill()
		t.m.LosePeer(peer, err)
		cb(peer, err)
	}()
	return true
}

// FailOpLocal fails operation (comm, seq) on this rank only
// (transport.Capabilities.FailOpLocal).
func (t *Transport) FailOpLocal(comm uint32, seq uint64, err error) { t.m.FailOp(comm, seq, err) }
