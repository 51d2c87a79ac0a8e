package sparcml

import (
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// subTransport is the view of the job's transport that a derived
// communicator (Split, Shrink) runs over: its ranks are indexes into
// members, the job ranks of the communicator's ranks in their new order.
// Messages travel on the job's connections; the communicator's own id in
// every tag keeps them apart from every other communicator's. Errors from
// the job's transport name job ranks (Comm.FailedRanks translates them).
type subTransport struct {
	root    transport.Transport
	members []int // job rank of each rank of the communicator
	rank    int   // this rank in the communicator
}

func (s *subTransport) Name() string { return s.root.Name() }
func (s *subTransport) Rank() int    { return s.rank }
func (s *subTransport) Size() int    { return len(s.members) }

// peer maps a rank of the communicator to the job's, or fails.
func (s *subTransport) peer(p int) (int, error) {
	if p < 0 || p >= len(s.members) || p == s.rank {
		return -1, fmt.Errorf("%w: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, s.rank, p, len(s.members))
	}
	return s.members[p], nil
}

func (s *subTransport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	w, err := s.peer(peer)
	if err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	return s.root.Send(w, tag, desc, bufs...)
}

func (s *subTransport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	w, err := s.peer(peer)
	if err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	return s.root.Recv(w, tag, desc, buf)
}

// FailOp tells every rank of the job, not only the members: the others
// have no operation with this communicator's id, so it costs them a
// record and nothing else.
func (s *subTransport) FailOp(comm uint32, seq uint64, err error) { s.root.FailOp(comm, seq, err) }

// Abort aborts the job's transport: the connections are shared.
func (s *subTransport) Abort(err error)        { s.root.Abort(err) }
func (s *subTransport) Err() error             { return s.root.Err() }
func (s *subTransport) Stats() transport.Stats { return s.root.Stats() }

// Caps announces nothing: a derived communicator fails an operation on
// this rank alone through the job's transport (failOpLocal).
func (s *subTransport) Caps() transport.Capabilities { return transport.Capabilities{} }

// Close releases nothing: the job's communicator owns the connections.
func (s *subTransport) Close() error { return nil }

// failOpLocal fails (comm, seq) on this rank only where the job's
// transport can, else on every rank.
func failOpLocal(t transport.Transport, comm uint32, seq uint64, err error) {
	if s, ok := t.(*subTransport); ok {
		t = s.root
	}
	if f := t.Caps().FailOpLocal; f != nil {
		f(comm, seq, err)
		return
	}
	t.FailOp(comm, seq, err)
}
