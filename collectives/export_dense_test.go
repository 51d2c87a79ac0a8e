package collectives

import "github.com/sparcml/sparcml/transport"

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

// HierarchicalAllreduceChunks is the hierarchical allreduce pipelined over
// the given number of chunks.
func HierarchicalAllreduceChunks[T Float](op *Op, data []T, red ReduceOp, seg, chunks int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	setDesc[T](op, transport.OpAllreduce, red, AlgoHierarchical, 0, len(data))
	return hierarchicalAllreduce(op, data, red, DefaultCostModel, seg, chunks)
}

const MaxHierarchicalChunks = maxHierarchicalChunks
