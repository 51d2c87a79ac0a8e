package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// A rank that dies during Init after it reached the store (killed, or
// crashed) leaves the others waiting for what it would have set or for
// the connections it would have made. Its store connection ends without
// a goodbye; the store fails the launch naming it, so every rank still in
// Init fails at once (OnLaunchFailure) instead of at SPARCML_INIT_TIMEOUT.
// A connection that ends while its process lives (a reset on the way)
// is redialled by the client (client.reconnect) within reconnectGrace,
// and the launch goes on.

// reconnectGrace is how long the store waits for a rank whose connection
// ended during Init to reconnect before it fails the launch, and how long
// a client tries to reconnect. A live client redials at once; the grace
// is several times the slowest reconnection BenchmarkStoreReconnect saw
// on a loaded host (docs/RELIABILITY.md has the figure and the command),
// and leaves most of the 5 s in which every rank must hear of the death.
const reconnectGrace = time.Second

// lostCause is the launch's failure when rank left the store during Init.
func lostCause(rank int) string {
	return fmt.Sprintf("rank %d left the rendezvous store during Init without a goodbye (killed or crashed?)", rank)
}

// cutShort handles a connection that claimed rank and ended during its
// handshake: the rank was killed on its way in, unless it connects
// within reconnectGrace (a live process retries at once).
func (s *server) cutShort(rank uint32) {
	if int64(rank) >= int64(s.size) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state[rank] == rankUnseen {
		s.lostLocked(int(rank))
	}
}

// isCutShort reports whether err is a connection's end (end of stream,
// reset), not a timeout or a protocol error.
func isCutShort(err error) bool {
	return isDisconnect(err) || errors.Is(err, syscall.ECONNRESET)
}

// lostLocked starts the grace of a rank whose connection just ended
// without a goodbye, if the rank was still in Init.
func (s *server) lostLocked(rank int) {
	if s.ready[rank] || s.fault != "" || s.stopping {
		return
	}
	s.losses[rank]++
	go s.failUnlessBack(rank, s.losses[rank])
}

// failUnlessBack fails the launch if rank has not reconnected within
// reconnectGrace of its loss number loss.
func (s *server) failUnlessBack(rank int, loss uint64) {
	timer := time.NewTimer(reconnectGrace)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.quit:
		return
	}
	s.mu.Lock()
	st := s.state[rank]
	gone := (st == rankLost || st == rankUnseen) && s.losses[rank] == loss && !s.stopping
	s.mu.Unlock()
	if gone {
		s.failLaunch(transport.CodePeerLost, lostCause(rank), nil)
	}
}

// peerLost answers opPeerLost: the sender's Init failed because its
// connection to another rank broke. If that rank's store connection ends
// too (now or within reconnectGrace), it died, and the launch fails
// naming it; otherwise the sender's failure is the cause. It waits on
// its own goroutine, so the sender's other requests go on.
func (s *server) peerLost(c *serverConn, f frame) error {
	if len(f.value) < 4 {
		return fmt.Errorf("%w: peer-lost report of %d bytes", errMalformed, len(f.value))
	}
	peer := int(binary.BigEndian.Uint32(f.value))
	mine := fmt.Sprintf("rank %d failed Init: %s", c.rank, f.value[4:])
	go func() {
		cause := mine
		if peer >= 0 && peer < s.size && peer != c.rank && s.awaitGone(peer) {
			cause = lostCause(peer)
		}
		if got := s.failLaunch(transport.CodePeerLost, cause, c); got != mine {
			c.out.push(s.faultFrame(f.id))
			return
		}
		c.out.push(frame{op: opOK, id: f.id})
	}()
	return nil
}

// awaitGone reports whether rank's store connection ended without a
// goodbye, waiting up to reconnectGrace for it to.
func (s *server) awaitGone(rank int) bool {
	timer := time.NewTimer(reconnectGrace)
	defer timer.Stop()
	for {
		s.mu.Lock()
		st, changed := s.state[rank], s.changed
		s.mu.Unlock()
		switch st {
		case rankLost:
			return true
		case rankFinished:
			return false
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-s.quit:
			return false
		}
	}
}

// AwaitReady tells the store that this rank's transport is up, and
// waits until every rank's is. From then on a rank's store connection
// ending is not the launch's failure: its peers see its death on their
// connections. Until then a rank whose own set-up was over still hears
// of a death during another's (as a *LaunchError, the cause every rank
// reports), rather than of the ranks that failed Init because of it.
func AwaitReady(ctx context.Context, st Store) error {
	c, ok := st.(*client)
	if !ok {
		return nil
	}
	r, err := c.call(ctx, frame{op: opReady})
	if err != nil {
		return fmt.Errorf("bootstrap: rank %d: waiting for every rank's transport: %w", c.rank, err)
	}
	if r.op != opOK {
		return fmt.Errorf("bootstrap: rank %d: waiting for every rank's transport: %w", c.rank, replyError(r))
	}
	return nil
}

// setReady answers opReady: once every rank is ready, every waiting
// rank's request is.
func (s *server) setReady(c *serverConn, id uint32) {
	s.mu.Lock()
	if !s.ready[c.rank] {
		s.ready[c.rank] = true
		s.nReady++
	}
	s.awaiting = append(s.awaiting, waiter{c: c, id: id})
	var answer []waiter
	if s.nReady == s.size {
		answer, s.awaiting = s.awaiting, nil
	}
	s.mu.Unlock()
	for _, w := range answer {
		w.c.out.push(frame{op: opOK, id: w.id})
	}
}

// reportPeerLost tells the store that this rank's Init failed because its
// connection to peer broke; the store answers with the launch's cause.
func reportPeerLost(c *client, peer int, cause string) *LaunchError {
	ctx, cancel := context.WithTimeout(context.Background(), reconnectGrace+time.Second)
	defer cancel()
	value := binary.BigEndian.AppendUint32(nil, uint32(peer))
	r, err := c.call(ctx, frame{op: opPeerLost, value: append(value, cause...)})
	if err == nil && r.op == opFault {
		le, _ := decodeFault(r.value)
		return le
	}
	return reportAnswer(err)
}

// lostPeer finds the peer a transport's set-up lost in err.
func lostPeer(err error) (int, bool) {
	var pe *transport.PeerError
	if errors.As(err, &pe) && errors.Is(pe.Kind, transport.ErrPeerLost) {
		return pe.Peer, true
	}
	return 0, false
}
