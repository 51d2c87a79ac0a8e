package collectives

import (
	"fmt"
	"strings"
	"unsafe"
)

// Float is the element type of dense collectives.
type Float interface{ ~float32 | ~float64 }

// Number is any fixed-size element that can be viewed as bytes.
type Number interface {
	~float32 | ~float64 | ~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64
}

// DType names an element type on the wire.
type DType uint8

// Element types.
const (
	DTypeNone DType = iota
	Float32
	Float64
)

var dtypeNames = [...]string{
	Float32: "float32",
	Float64: "float64",
}

// String returns the type's name ("float32"), or "dtype(N)" for an unknown
// value.
func (d DType) String() string {
	if int(d) < len(dtypeNames) && dtypeNames[d] != "" {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float64:
		return 8
	}
	return 0
}

// DTypeOf returns the DType of T.
func DTypeOf[T Float]() DType {
	var z T
	if unsafe.Sizeof(z) == 4 {
		return Float32
	}
	return Float64
}

// ReduceOp is the reduction applied by Allreduce and ReduceScatter.
type ReduceOp uint8

// Reductions. Avg is Sum divided by the number of ranks (NCCL's
// ncclAvg): the partial results combine as a sum, and the division is done
// once, on the complete sum, so the result is the correctly rounded
// quotient of the sum the algorithm computed.
const (
	Sum ReduceOp = iota
	Min
	Max
	Avg
)

var reduceNames = [...]string{
	Sum: "sum",
	Min: "min",
	Max: "max",
	Avg: "avg",
}

// String returns the reduction's name ("sum"), or "reduce(N)" for an
// unknown value.
func (r ReduceOp) String() string {
	if int(r) < len(reduceNames) && reduceNames[r] != "" {
		return reduceNames[r]
	}
	return fmt.Sprintf("reduce(%d)", uint8(r))
}

// ParseReduceOp parses a reduction name as printed by ReduceOp.String.
func ParseReduceOp(s string) (ReduceOp, error) {
	for r := Sum; r <= Avg; r++ {
		if strings.EqualFold(s, r.String()) {
			return r, nil
		}
	}
	return Sum, fmt.Errorf("unknown reduction %q (want sum, avg, min or max)", s)
}

// Algo selects an algorithm. AlgoAuto lets the cost model choose.
type Algo uint8

// Algorithms. Dense allreduce uses Ring, Rabenseifner and
// RecursiveDoubling; sparse allreduce the SSAR/DSAR family and
// AllgatherSparse.
const (
	AlgoAuto Algo = iota
	AlgoRing
	AlgoRabenseifner
	AlgoRecursiveDoubling
	AlgoSSARRecursiveDoubling
	AlgoSSARSplitAllgather
	AlgoDSAR
	AlgoSparseAllgather
	AlgoDirect // simple direct or tree schemes (broadcast, barrier, allgatherv)
	// AlgoQuantizedSplit is QuantizedAllreduce's direct-send reduce-scatter
	// plus allgather of encoded blocks.
	AlgoQuantizedSplit
	// AlgoHierarchical is the dense allreduce that follows Op.Topo:
	// reduce-scatter within each host, allreduce across hosts, allgather
	// within each host.
	AlgoHierarchical
	algoCount
)

var algoNames = [...]string{
	AlgoAuto:                  "auto",
	AlgoRing:                  "ring",
	AlgoRabenseifner:          "rabenseifner",
	AlgoRecursiveDoubling:     "recursive-doubling",
	AlgoSSARRecursiveDoubling: "ssar-rd",
	AlgoSSARSplitAllgather:    "ssar-split",
	AlgoDSAR:                  "dsar",
	AlgoSparseAllgather:       "allgather",
	AlgoDirect:                "direct",
	AlgoQuantizedSplit:        "quantized-split",
	AlgoHierarchical:          "hierarchical",
}

func (a Algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

// ParseAlgo parses an algorithm name as printed by Algo.String.
func ParseAlgo(s string) (Algo, error) {
	for i, n := range algoNames {
		if strings.EqualFold(s, n) {
			return Algo(i), nil
		}
	}
	return AlgoAuto, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(algoNames[:], ", "))
}

// AsBytes views a slice of numbers as bytes without copying. The machine's
// byte order is the wire's: every rank of a job must share it (all
// platforms Go supports for this library are little-endian).
func AsBytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// FromBytes views bytes as a slice of numbers without copying. len(b) must
// be a multiple of the element size and b suitably aligned (buffers from
// make, GetBuf or AsBytes are).
func FromBytes[T Number](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) < sz {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz)
}
