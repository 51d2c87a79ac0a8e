package world

import (
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// SubTransport is the view of the job's transport that a derived
// communicator (Split, Shrink) runs over: its ranks are indexes into
// members, the job ranks of the communicator's ranks in their new order.
// Messages travel on the job's connections; the communicator's own id in
// every tag keeps them apart from every other communicator's. Errors from
// the job's transport name job ranks (Members.LocalRank translates them).
type SubTransport struct {
	root    transport.Transport
	members Members // job rank of each rank of the communicator
	rank    int     // this rank in the communicator
}

// NewSubTransport is the view of root for the communicator of the job
// ranks members (in their order) in which this rank is rank.
func NewSubTransport(root transport.Transport, members Members, rank int) *SubTransport {
	return &SubTransport{root: root, members: members, rank: rank}
}

func (s *SubTransport) Name() string { return s.root.Name() }
func (s *SubTransport) Rank() int    { return s.rank }
func (s *SubTransport) Size() int    { return len(s.members) }

// peer maps a rank of the communicator to the job's, or fails.
func (s *SubTransport) peer(p int) (int, error) {
	if p < 0 || p >= len(s.members) || p == s.rank {
		return -1, fmt.Errorf("%w: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, s.rank, p, len(s.members))
	}
	return s.members[p], nil
}

func (s *SubTransport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	w, err := s.peer(peer)
	if err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	return s.root.Send(w, tag, desc, bufs...)
}

func (s *SubTransport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	w, err := s.peer(peer)
	if err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	return s.root.Recv(w, tag, desc, buf)
}

// FailOp tells every rank of the job, not only the members: the others
// have no operation with this communicator's id, so it costs them a
// record and nothing else.
func (s *SubTransport) FailOp(comm uint32, seq uint64, err error) { s.root.FailOp(comm, seq, err) }

// Abort aborts the job's transport: the connections are shared.
func (s *SubTransport) Abort(err error)        { s.root.Abort(err) }
func (s *SubTransport) Err() error             { return s.root.Err() }
func (s *SubTransport) Stats() transport.Stats { return s.root.Stats() }

// Caps is the job's transport's scheduling only (transport.ViewCaps): a
// derived communicator fails an operation on this rank alone through the
// job's transport (FailOpLocal).
func (s *SubTransport) Caps() transport.Capabilities { return transport.ViewCaps(s.root) }

// Close releases nothing: the job's communicator owns the connections.
func (s *SubTransport) Close() error { return nil }

// Job is the job's transport under t: t itself, or the transport a
// SubTransport views.
func Job(t transport.Transport) transport.Transport {
	if s, ok := t.(*SubTransport); ok {
		return s.root
	}
	return t
}

// FailOpLocal fails (comm, seq) on this rank only where the job's
// transport can, else on every rank.
func FailOpLocal(t transport.Transport, comm uint32, seq uint64, err error) {
	t = Job(t)
	if f := t.Caps().FailOpLocal; f != nil {
		f(comm, seq, err)
		return
	}
	t.FailOp(comm, seq, err)
}
