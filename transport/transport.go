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
	"encoding/binary"
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
	OpGlobalTopk
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
	OpGlobalTopk:      "global-topk",
}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Desc describes the operation a message belongs to. Every message carries
// it and the receiver compares it with its own: a difference means the
// ranks called different operations (or the same one with different
// arguments) at one sequence number, and the receive fails with a
// MismatchError naming both sides.
//
// A transport compares descriptors as a whole and interprets none of the
// fields but Kind (see Matcher): DType, Reduce, Algo and Param are enums
// and parameters of the layer above, which names them for people (String
// prints plain numbers).
type Desc struct {
	Kind   OpKind
	DType  uint8  // element type
	Reduce uint8  // reduction
	Algo   uint8  // algorithm
	Root   int32  // root rank of a rooted operation
	Count  uint64 // element count every rank must agree on
	// Param is any further argument the ranks must agree on, in a form
	// only the layer above knows (the collectives put the value codec
	// here); 0 when there is none.
	Param uint64
}

// DescSize is the size of a Desc on the wire (EncodeDesc).
const DescSize = 24

// EncodeDesc writes d into b[:DescSize], little-endian: kind, dtype,
// reduce and algo (one byte each), root (4 bytes), count (8), param (8).
// Every transport puts descriptors on the wire this way.
func EncodeDesc(b []byte, d Desc) {
	_ = b[DescSize-1]
	b[0], b[1], b[2], b[3] = byte(d.Kind), d.DType, d.Reduce, d.Algo
	binary.LittleEndian.PutUint32(b[4:], uint32(d.Root))
	binary.LittleEndian.PutUint64(b[8:], d.Count)
	binary.LittleEndian.PutUint64(b[16:], d.Param)
}

// DecodeDesc reads the descriptor EncodeDesc wrote into b[:DescSize]. Any
// bytes are a descriptor: a receiver only compares it with its own.
func DecodeDesc(b []byte) Desc {
	_ = b[DescSize-1]
	return Desc{
		Kind:   OpKind(b[0]),
		DType:  b[1],
		Reduce: b[2],
		Algo:   b[3],
		Root:   int32(binary.LittleEndian.Uint32(b[4:])),
		Count:  binary.LittleEndian.Uint64(b[8:]),
		Param:  binary.LittleEndian.Uint64(b[16:]),
	}
}

// String prints the fields as numbers, since only the layer above knows
// their names.
func (d Desc) String() string {
	return fmt.Sprintf("%s(dtype=%d reduce=%d algo=%d root=%d count=%d param=%#x)",
		d.Kind, d.DType, d.Reduce, d.Algo, d.Root, d.Count, d.Param)
}

// Transport connects one rank to all the others of a job. Implementations
// must be safe for concurrent use: several operations may send and receive
// at once. The conformance suite in package transporttest holds every
// implementation to this contract.
type Transport interface {
	// Name is the transport's short name ("tcp", "rdma", "inmem").
	Name() string
	Rank() int
	Size() int

	// Send starts sending the concatenation of bufs to peer as one message
	// tagged tag. The buffers must not be modified until the request
	// completes. peer must differ from Rank(). Send never waits for the
	// peer; when the peer's budget for messages that arrived before
	// their receive is spent, the request stays pending until the peer
	// posts receives.
	Send(peer int, tag Tag, desc Desc, bufs ...[]byte) *Request

	// Recv starts receiving the message tagged tag from peer. If buf has
	// the capacity for the payload it lands there (zero-copy where the
	// transport can); otherwise a new buffer is allocated. Request.Data
	// gives the payload once complete.
	Recv(peer int, tag Tag, desc Desc, buf []byte) *Request

	// FailOp fails every pending and later receive of operation
	// (comm, seq) on this rank and tells every peer to do the same, with
	// err as the cause. Used for mismatches and cancellation; the
	// transport stays usable for other operations. The peers' receives
	// fail with FailureOf(Rank(), err): err's code and text (encoded by
	// AppendFailure on a wire), never its text alone.
	FailOp(comm uint32, seq uint64, err error)

	// Abort fails everything pending and later with err and closes the
	// connections. Peers see this rank as lost.
	Abort(err error)

	// Err returns the sticky error once the transport has failed (a peer
	// was lost, or Abort was called), nil before.
	Err() error

	// Stats returns the counters since the transport was created.
	Stats() Stats

	// Caps reports what the transport can do beyond this contract
	// (Capabilities); the conformance suite holds it to what it reports.
	Caps() Capabilities

	// Close releases the transport. Pending and later requests fail with
	// ErrClosed. Peers see a graceful close: what this rank sent before
	// is still delivered, and only what still involves it fails there,
	// naming it. Close may be called more than once.
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
