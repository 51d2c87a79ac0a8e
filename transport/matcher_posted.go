package transport

// ClaimPosted is Claim for a message announced before its payload that
// the transport can leave with the sender until it has a destination (a
// rendezvous request whose sender keeps its buffer): it claims the message
// only when the matcher can settle it without buffering, and otherwise
// reports ok false and changes nothing, so that the payload is later moved
// once, straight into the receive buffer, instead of into an unexpected
// buffer first and copied again when the receive comes.
//
// Settled without buffering are: a posted receive with this tag (Dst is
// its buffer, or a larger one), a message of a failed operation (Dst is
// nil: drop it) and one of another collective kind than its operation
// (KindMismatch, as in Claim). err is the matcher's error once it has
// failed.
func (m *Matcher) ClaimPosted(peer int, tag Tag, desc Desc, n int) (c Claimed, ok bool, err error) {
	k := mkey{peer, tag}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return Claimed{}, false, m.err
	}
	if _, failed := m.failed[opKey{tag.Comm, tag.Seq}]; failed {
		return Claimed{m: m}, true, nil
	}
	if m.kindMismatchLocked(peer, tag, desc) {
		return Claimed{m: m, mismatch: true}, true, nil
	}
	if p, posted := m.posted[k]; posted {
		delete(m.posted, k)
		return m.takeLocked(p, peer, tag, desc, n), true, nil
	}
	return Claimed{}, false, nil
}
