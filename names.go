package sparcml

import (
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
