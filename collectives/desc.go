package collectives

import (
	"fmt"
	"strings"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport"
)

// Descriptors.
//
// Every message of an operation carries its transport.Desc, and a
// receiver fails the operation on every rank when a peer's differs from
// its own. The transport compares descriptors without interpreting them;
// the fields' meaning is this package's:
//
//   - Kind: the collective. Every message of one call carries the kind of
//     the call, whatever runs inside it (the dense end of a sparse
//     allreduce is still a sparse allreduce), so the transport's check
//     that the ranks run one kind per sequence number is plain equality.
//   - DType, Reduce, Algo: the DType, ReduceOp and Algo of the call (Sum
//     where the call has no reduction).
//   - Root: the root of a broadcast.
//   - Count: the element count (a sparse vector's dimension).
//   - Param: the value codec when one is used (codecParam), else 0.

// setDesc fills the descriptor every message of the operation carries, so
// that ranks calling different collectives, types, reductions, algorithms,
// roots or lengths at the same sequence number detect it.
func setDesc[T Float](op *Op, kind transport.OpKind, red ReduceOp, algo Algo, root, count int) {
	op.Desc = transport.Desc{
		Kind:   kind,
		DType:  uint8(DTypeOf[T]()),
		Reduce: uint8(red),
		Algo:   uint8(algo),
		Root:   int32(root),
		Count:  uint64(count),
	}
}

// codecParam is the Desc.Param of an operation whose values travel in a
// codec's format: the kind in the low byte and the bucket size (0 for the
// kinds without buckets) above it. Streams of one stochastic kind with
// different buckets can have equal sizes but different layouts, so ranks
// must agree on both.
func codecParam(kind quant.Kind, bucket int) uint64 {
	return uint64(bucket)<<8 | uint64(kind)
}

// codecParamOf is codecParam for a codec; 0 for none.
func codecParamOf(c quant.Codec) uint64 {
	if c == nil {
		return 0
	}
	return codecParam(c.Kind(), c.BucketSize())
}

// splitCodecParam undoes codecParam.
func splitCodecParam(p uint64) (kind quant.Kind, bucket uint64) {
	return quant.Kind(p), p >> 8
}

// descFields says which fields of a descriptor of each kind are its
// arguments, and so are printed even when zero (Sum, root 0, count 0).
// Other fields are printed only when they are set: a field one rank set
// by mistake is never hidden from the message that reports the mismatch.
var descFields = map[transport.OpKind]string{
	transport.OpAllreduce:       "dtype reduce algo count",
	transport.OpReduceScatter:   "dtype reduce algo count",
	transport.OpAllgather:       "dtype algo count",
	transport.OpAllgatherv:      "dtype algo count",
	transport.OpBroadcast:       "dtype algo root count",
	transport.OpBarrier:         "algo",
	transport.OpP2P:             "dtype count",
	transport.OpSparseAllreduce: "dtype reduce algo dim codec",
	transport.OpSparseAllgather: "dtype algo dim codec",
	transport.OpGlobalTopk:      "dtype reduce dim codec",
}

// DescString prints a descriptor with this package's names for its
// enums, e.g. "allreduce(dtype=float32 reduce=sum algo=ring count=1024)";
// unknown values print as numbers ("dtype(9)").
func DescString(d transport.Desc) string {
	want := descFields[d.Kind]
	if want == "" {
		want = "dtype reduce algo root count codec" // internal and unknown kinds: everything
	}
	shown := func(name string, set bool) bool {
		return set || strings.Contains(" "+want+" ", " "+name+" ")
	}
	var parts []string
	add := func(name string, set bool, value any) {
		if shown(name, set) {
			parts = append(parts, fmt.Sprintf("%s=%v", name, value))
		}
	}
	add("dtype", d.DType != 0, DType(d.DType))
	add("reduce", d.Reduce != 0, ReduceOp(d.Reduce))
	add("algo", d.Algo != 0, Algo(d.Algo))
	if d.Kind == transport.OpGlobalTopk { // Root carries K (GlobalTopk)
		add("k", true, uint32(d.Root))
	} else {
		add("root", d.Root != 0, d.Root)
	}
	if strings.Contains(want, "dim") {
		add("dim", true, d.Count)
	} else {
		add("count", d.Count != 0, d.Count)
	}
	if shown("codec", d.Param != 0) {
		kind, bucket := splitCodecParam(d.Param)
		s := "codec=" + kind.String()
		if bucket != 0 {
			s += fmt.Sprintf(" bucket=%d", bucket)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%v(%s)", d.Kind, strings.Join(parts, " "))
}

// mismatchError is a transport.MismatchError told with the names of this
// package's enums. errors.As still finds the transport's error in it, and
// errors.Is(err, transport.ErrMismatch) holds.
type mismatchError struct{ m *transport.MismatchError }

func (e *mismatchError) Error() string {
	return fmt.Sprintf("%v: rank %d called %s but rank %d called %s",
		transport.ErrMismatch, e.m.Rank, DescString(e.m.Local), e.m.Peer, DescString(e.m.Remote))
}

func (e *mismatchError) Unwrap() error { return e.m }

// describe gives a mismatch the names of the descriptors' enums; other
// errors are returned as they are.
func describe(err error) error {
	if m, ok := err.(*transport.MismatchError); ok {
		return &mismatchError{m}
	}
	return err
}
