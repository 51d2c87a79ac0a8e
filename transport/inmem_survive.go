package transport

// Survive switches to the per-peer failure model (Capabilities.Survive).
func (t *InMemory) Survive(lost func(peer int, err error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onLost = lost
	t.lost = make(map[int]bool)
}

// survivePeer handles a peer's death in the per-peer model and reports
// whether it did (false: the model is sticky, or this rank has failed).
func (t *InMemory) survivePeer(lost *PeerError) bool {
	t.mu.Lock()
	cb := t.onLost
	if cb == nil || t.err != nil {
		t.mu.Unlock()
		return false
	}
	first := !t.lost[lost.Peer]
	t.lost[lost.Peer] = true
	t.mu.Unlock()
	if first {
		t.m.LosePeer(lost.Peer, lost)
		go cb(lost.Peer, lost)
	}
	return true
}
