package transport

// LosePeer is FailPeer for a peer that died: besides its posted and later
// receives, those whose payload it had started sending fail too, since
// the rest will not come. The transport must have stopped filling
// receives from that peer (closed its connections and waited for the
// readers writing into receive buffers), as for Abort.
func (m *Matcher) LosePeer(peer int, err error) {
	m.FailPeer(peer, err)
	var fail []*Request
	m.mu.Lock()
	for r := range m.claimed {
		if r.Peer == peer {
			fail = append(fail, r)
			delete(m.claimed, r)
		}
	}
	for k, msg := range m.unexpected {
		if k.peer == peer {
			m.release(peer, int64(len(msg.data)))
			delete(m.unexpected, k)
		}
	}
	m.mu.Unlock()
	for _, r := range fail {
		r.Complete(nil, err)
	}
}

// FailOpLocal fails operation (comm, seq) on this rank only
// (Capabilities.FailOpLocal).
func (t *InMemory) FailOpLocal(comm uint32, seq uint64, err error) { t.m.FailOp(comm, seq, err) }
