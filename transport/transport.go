// Package transport defines the small interface every sparcml transport
// implements (TCP in fallback/, RDMA in rdma/, in-memory here) and the
// pieces they share: tags, operation descriptors, requests, the receive
// matcher and the error types.
//
// The shape follows NCCL's network plugin and Gloo's pair/buffer: sends and
// receives start at once and return a Request that is polled with Test or
// waited on with a deadline. Messages are matched by (peer, Tag); a receiver
// does not need to know a message's size in advance.
package transport

import (
	"fmt"
)

// Tag names one message of one collective: the communicator, the
// operation's sequence number on that communicator, and the step inside the
// operation. A given (sender, receiver, Tag) must carry at most one message,
// so several operations can be in flight at once without mixing data.
type Tag struct {
	Comm uint32
	Seq  uint64
	Step uint32
}

func (t Tag) String() string {
	return fmt.Sprintf("comm %d seq %d step %d", t.Comm, t.Seq, t.Step)
}

// OpKind is the kind of collective a message belongs to.
type OpKind uint8

// Operation kinds carried in every message so that ranks calling different
// collectives detect it instead of mixing data.
const (
	OpNone OpKind = iota
	OpAllreduce
	OpReduceScatter
	OpAllgather
	OpAllgatherv
	OpBroadcast
	OpBarrier
	OpP2P
	OpSparseAllreduce
	OpSparseAllgather
	OpInternal // bootstrap-time probes and agreement rounds
	opKindCount
)

var opNames = [...]string{
	OpNone:            "none",
	OpAllreduce:       "allreduce",
	OpReduceScatter:   "reduce-scatter",
	OpAllgather:       "allgather",
	OpAllgatherv:      "allgatherv",
	OpBroadcast:       "broadcast",
	OpBarrier:         "barrier",
	OpP2P:             "p2p",
	OpSparseAllreduce: "sparse-allreduce",
	OpSparseAllgather: "sparse-allgather",
	OpInternal:        "internal",
}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Desc describes the collective a message belongs to. Every message carries
// it and a receiver compares it with its own: a difference means the ranks
// called different collectives (or the same one with different arguments),
// and the operation fails on every rank with an error naming both sides.
// DType, Reduce and Algo are small enums owned by the layers above; Count
// is the element count every rank must agree on (the dimension for sparse
// operations).
type Desc struct {
	Kind   OpKind
	DType  uint8
	Reduce uint8
	Algo   uint8
	Root   int32
	Count  uint64
}

// DescSize is the encoded size of a Desc.
const DescSize = 16

func (d Desc) String() string {
	return fmt.Sprintf("%s(dtype=%d reduce=%d algo=%d root=%d count=%d)",
		d.Kind, d.DType, d.Reduce, d.Algo, d.Root, d.Count)
}

// Transport connects one rank to all the others of a job. Implementations
// must be safe for concurrent use: several operations may send and receive
// at once.
type Transport interface {
	// Name is the transport's short name ("tcp", "rdma", "inmem").
	Name() string
	Rank() int
	Size() int

	// Send starts sending the concatenation of bufs to peer as one message
	// tagged tag. The buffers must not be modified until the request
	// completes. peer must differ from Rank().
	Send(peer int, tag Tag, desc Desc, bufs ...[]byte) *Request

	// Recv starts receiving the message tagged tag from peer. If buf has
	// the capacity for the payload it lands there (zero-copy where the
	// transport can); otherwise a new buffer is allocated. Request.Data
	// gives the payload once complete.
	Recv(peer int, tag Tag, desc Desc, buf []byte) *Request

	// FailOp fails every pending and later receive of operation
	// (comm, seq) on this rank and tells every peer to do the same, with
	// err as the cause. Used for mismatches and cancellation; the
	// transport stays usable for other operations.
	FailOp(comm uint32, seq uint64, err error)

	// Abort fails everything pending and later with err and closes the
	// connections. Peers see this rank as lost.
	Abort(err error)

	// Err returns the sticky error once the transport has failed (a peer
	// was lost, or Abort was called), nil before.
	Err() error

	// Stats returns the counters since the transport was created.
	Stats() Stats

	// Close releases the transport. Pending requests fail with ErrClosed.
	Close() error
}

// Stats counts payload bytes and messages; headers are not included.
type Stats struct {
	BytesSent uint64
	BytesRecv uint64
	MsgsSent  uint64
	MsgsRecv  uint64
}

// Sub returns s minus o, for measuring one operation.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		BytesSent: s.BytesSent - o.BytesSent,
		BytesRecv: s.BytesRecv - o.BytesRecv,
		MsgsSent:  s.MsgsSent - o.MsgsSent,
		MsgsRecv:  s.MsgsRecv - o.MsgsRecv,
	}
}
