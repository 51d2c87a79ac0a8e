package transport

// Survivor is implemented by a transport that can go on for the
// survivors when a peer is lost (the per-peer failure model that
// communicator shrinking needs; ULFM's MPI_Comm_shrink and NCCL's
// ncclCommShrink assume the same of their networks). By default a lost
// peer is sticky, as the Transport contract says: everything pending and
// later fails. After Survive, a lost peer (a broken connection, a
// protocol error, an Abort on its side) fails only what involves it:
// pending and later sends to it and receives from it, naming it; the
// connections to the other ranks stay up and Err stays nil. lost is
// called once per lost peer, from a goroutine of its own, so the layer
// above can fail the operations that wait on other ranks because of the
// loss. A peer's graceful Close is not a loss and does not call lost.
// Call Survive before any operation.
type Survivor interface {
	Survive(lost func(peer int, err error))
}

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

// LocalOpFailer is implemented by a transport that can fail one operation
// on this rank only, without telling the peers (FailOp tells them): a
// rank that saw a peer die fails its own operations that wait because of
// it, and every other survivor does the same when it sees the death, so
// each one's error names the dead rank rather than the first survivor to
// notice.
type LocalOpFailer interface {
	FailOpLocal(comm uint32, seq uint64, err error)
}

// FailOpLocal implements LocalOpFailer.
func (t *InMemory) FailOpLocal(comm uint32, seq uint64, err error) { t.m.FailOp(comm, seq, err) }
