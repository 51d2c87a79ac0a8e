package collectives

import "github.com/sparcml/sparcml/quant"

// Hooks for the external tests of QuantizedAllreduce: a chosen segment
// size, so small vectors take several messages per block, the matching
// byte prediction, and the descriptor of a codec.

func QuantizedAllreduceSeg[T Float](op *Op, data []T, red ReduceOp, codec quant.Codec, seg int) error {
	return quantizedAllreduce(op, data, red, codec, seg)
}

func QuantizedBytesSentSeg(n, seg, p, rank int, codec quant.Codec) int64 {
	return quantizedBytesSent(n, seg, p, rank, codec)
}

func CodecParam(c quant.Codec) uint64 { return codecParamOf(c) }
