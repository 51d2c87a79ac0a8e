package sparcml

import (
	"strings"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
)

// AlgoDirect names the simple direct or tree schemes of broadcast,
// barrier, allgatherv, sparse allgather and point-to-point operations.
const AlgoDirect = collectives.AlgoDirect

// ParseAlgo parses an algorithm name as Algo's String method prints it
// ("auto", "ring", "rabenseifner", "ssar-split", ...), ignoring case.
func ParseAlgo(s string) (Algo, error) { return collectives.ParseAlgo(s) }

// ParseReduceOp parses a reduction name ("sum", "avg", "min", "max"),
// ignoring case.
func ParseReduceOp(s string) (ReduceOp, error) { return collectives.ParseReduceOp(s) }

// ParseQuant parses a value encoding's name ("none", "fp16", "bf16", "q8",
// "q4", "q2"), ignoring case.
func ParseQuant(s string) (Quant, error) { return quant.ParseKind(s) }

// AllreduceBytesSent returns exactly how many payload bytes rank sends in
// a dense allreduce of count elements of elemSize bytes over p ranks with
// algorithm a (not AlgoAuto): the figure the benchmark compares with the
// transport's counters.
func AllreduceBytesSent(a Algo, count, elemSize, p, rank int) int64 {
	return collectives.AllreduceBytesSent(a, count, elemSize, p, rank)
}

// ElemSize is the size in bytes of one element of type T.
func ElemSize[T Float]() int { return collectives.DTypeOf[T]().Size() }

// TransportNames lists the values WithTransport and SPARCML_TRANSPORT
// accept: "auto", "shm", "tcp", "rdma".
func TransportNames() []string { return append([]string(nil), transportModes...) }

// ParseTransport checks a transport name for WithTransport, ignoring case;
// the empty string (the environment's choice, SPARCML_TRANSPORT) is valid.
func ParseTransport(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, _, err := transportMode(options{transport: s}); err != nil {
		return "", err
	}
	return strings.ToLower(s), nil
}
