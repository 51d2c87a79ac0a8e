package collectives

// Hooks for the external tests: the dense collectives with a chosen segment
// size, so that small vectors still exercise multi-segment pipelines.

func AllreduceSeg[T Float](op *Op, data []T, red ReduceOp, algo Algo, model CostModel, seg int) (Algo, error) {
	return allreduce(op, data, red, algo, model, seg)
}

func ReduceScatterSeg[T Float](op *Op, in, out []T, red ReduceOp, algo Algo, seg int) error {
	return reduceScatter(op, in, out, red, algo, seg)
}

func AllgatherSeg[T Float](op *Op, in, out []T, algo Algo, seg int) error {
	return allgather(op, in, out, algo, seg)
}

func AllgathervSeg[T Float](op *Op, in, out []T, counts []int, algo Algo, seg int) error {
	return allgatherv(op, in, out, counts, algo, seg)
}

func BroadcastSeg[T Float](op *Op, data []T, root int, algo Algo, seg int) error {
	return broadcast(op, data, root, algo, seg)
}
