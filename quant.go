package sparcml

import (
	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
)

// Quant names a low-precision value encoding: QuantNone (exact), fp16,
// bf16, or stochastic quantization with 8, 4 or 2 bits per value
// (QSGD-style, unbiased, one float32 scale per bucket).
type Quant = quant.Kind

// Value encodings for WithQuant.
const (
	QuantNone = quant.None
	QuantFP16 = quant.FP16
	QuantBF16 = quant.BF16
	QuantQ8   = quant.Q8
	QuantQ4   = quant.Q4
	QuantQ2   = quant.Q2
)

// AlgoQuantizedSplit is the dense allreduce used under WithQuant: a
// direct-send reduce-scatter and an allgather, each value quantized once
// per contribution and once for the result, whatever the number of ranks.
const AlgoQuantizedSplit = collectives.AlgoQuantizedSplit

// WithQuant sends the values of a sum allreduce (dense or sparse) in a
// low-precision encoding; indices of sparse messages stay exact. Every
// rank must pass the same encoding and bucket size, or the operation fails
// on every rank. Reductions accumulate in float32 or wider. See
// docs/QUANTIZATION.md for the error each encoding adds.
func WithQuant(k Quant) CallOption { return func(c *callConfig) { c.quant = k } }

// WithQuantBucket sets the number of values sharing one scale in the
// stochastic encodings of dense allreduce (default 1024; sparse messages
// always use 1024).
func WithQuantBucket(n int) CallOption { return func(c *callConfig) { c.quantBucket = n } }

// codecFor builds the codec of one call. The seed differs per rank and per
// operation so rounding noise averages out across ranks and steps.
func codecFor(cc callConfig, rank int, seq uint64) (quant.Codec, error) {
	return quant.New(cc.quant, quant.Options{BucketSize: cc.quantBucket, Seed: quantSeed(rank, seq)})
}

func quantSeed(rank int, seq uint64) uint64 {
	return uint64(rank+1)*0x9E3779B97F4A7C15 ^ seq*0xBF58476D1CE4E5B9
}
