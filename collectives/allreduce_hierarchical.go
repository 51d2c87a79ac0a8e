package collectives

// Hierarchical allreduce: the schedule of NCCL's and Horovod's
// hierarchical allreduce, for H hosts of L ranks each (P = H*L), on
// Op.Topo, pipelined over chunks as NCCL pipelines it.
//
// The vector is cut into K chunks (hierarchicalChunks). Each chunk goes
// through three phases:
//
//  1. Within each host, the ring reduce-scatter cuts the chunk into L
//     blocks; local rank l ends with block l summed over its host:
//     (L-1) messages of c/L bytes per rank over the host's links, for a
//     chunk of c bytes.
//  2. Across hosts, the L ranks of index l (one per host) allreduce block
//     l with the flat algorithm the cost model picks for c/L bytes on H
//     ranks: every host's L ranks cross the network at once, each with a
//     1/L share, so a host sends 2(H-1)/H * c bytes over its link in the
//     ring (the least any algorithm can; a flat ring over P ranks numbered
//     host by host sends 2(P-1)/P * c), in 2(H-1) steps instead of
//     2(P-1), and with no byte of it going through another host.
//  3. Within each host, the ring allgather gives every rank all L blocks:
//     (L-1) messages of c/L bytes per rank.
//
// Each phase runs in a goroutine of its own and takes chunk i as soon as
// the phase before has finished it, so while chunk i crosses the network,
// chunk i+1 is reduce-scattered within the host and chunk i-1 gathered:
// the host's CPU work (phases 1 and 3) hides behind the network's (2)
// but for the first and last chunk. The bytes are those of the schedule
// without chunks; only the number of messages grows.
//
// Avg runs as Sum and divides block l by P once, after step 2. Min and Max
// reduce as they are at every step. Tags: chunk i's phases start at step
// i*hierarchicalChunkSpan; phases 1 and 3 use the same pairs of ranks, so
// phase 3's steps are moved up by hierarchicalGatherBase; phase 2's pairs
// are on different hosts and share no tag with them.

const (
	// hierarchicalChunkBytes is the chunk size the pipeline aims for;
	// the default is the fastest of the sizes tried on the emulated
	// cluster (docs/DEFAULTS.md, "Hierarchical chunks").
	hierarchicalChunkBytes = 8 << 20
	// maxHierarchicalChunks bounds the number of chunks, so that every
	// chunk's phase has hierarchicalChunkSpan steps of its own.
	maxHierarchicalChunks = 16
	// hierarchicalChunkSpan is the steps of one chunk's phase: 32 rounds
	// of the recursive algorithms (stepsPerRound), and a ring of 2^27
	// steps, which a chunk would reach only with 2^26 segments per block.
	hierarchicalChunkSpan = (1 << 31) / maxHierarchicalChunks
	// hierarchicalGatherBase is where phase 3's steps start, above every
	// chunk's phase 1 and 2.
	hierarchicalGatherBase = 1 << 31
)

// hierarchicalChunks is the number of chunks the pipeline cuts a vector of
// bytes into: chunks of about hierarchicalChunkBytes, at least one and at
// most maxHierarchicalChunks.
func hierarchicalChunks(bytes int) int {
	return min(max(ceilDiv(bytes, hierarchicalChunkBytes), 1), maxHierarchicalChunks)
}

// hierarchicalAllreduce runs the schedule above on op.Topo in chunks
// chunks (1 <= chunks <= maxHierarchicalChunks).
func hierarchicalAllreduce[T Float](op *Op, data []T, red ReduceOp, model CostModel, seg, chunks int) error {
	lv, err := topologyLevels(op)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return dissemination(op)
	}
	if chunks < 1 || chunks > maxHierarchicalChunks {
		return failInvalid(op, "hierarchical allreduce in %d chunks (1 to %d)", chunks, maxHierarchicalChunks)
	}
	chunks = min(chunks, len(data)) // no empty chunk
	h := &hierarchicalChunked[T]{op: op, lv: lv, data: data, red: red, model: model, seg: seg, chunks: chunks}
	var stages []func(int) error
	if len(lv.local) > 1 {
		stages = append(stages, h.reduceScatter)
	}
	stages = append(stages, h.crossHosts)
	if len(lv.local) > 1 {
		stages = append(stages, h.gather)
	}
	return runChunkPipeline(op.Ctx, op.T, chunks, stages)
}

// hierarchicalChunked is one hierarchical allreduce cut into chunks; its
// methods are the phases of one chunk.
type hierarchicalChunked[T Float] struct {
	op     *Op
	lv     levels
	data   []T
	red    ReduceOp
	model  CostModel
	seg    int
	chunks int
}

// chunk returns chunk i of the vector and its layout of L blocks.
func (h *hierarchicalChunked[T]) chunk(i int) ([]T, layout) {
	lo, hi := part(len(h.data), h.chunks, i)
	return h.data[lo:hi], balanced(hi-lo, len(h.lv.local))
}

// block returns this rank's block of chunk i.
func (h *hierarchicalChunked[T]) block(i int) []T {
	c, blocks := h.chunk(i)
	lo, hi := blocks.block(h.lv.localIndex)
	return c[lo:hi]
}

// partial is the reduction of the phases before the last division.
func (h *hierarchicalChunked[T]) partial() ReduceOp {
	if h.red == Avg {
		return Sum
	}
	return h.red
}

func (h *hierarchicalChunked[T]) reduceScatter(i int) error {
	c, _ := h.chunk(i)
	local := subOp(h.op, h.lv.local, uint32(i)*hierarchicalChunkSpan)
	return ringReduceScatter(local, c, h.block(i), h.partial(), true, h.seg)
}

func (h *hierarchicalChunked[T]) crossHosts(i int) error {
	block := h.block(i)
	if len(h.lv.cross) > 1 {
		cross := subOp(h.op, h.lv.cross, uint32(i)*hierarchicalChunkSpan)
		var err error
		if len(block) == 0 {
			err = dissemination(cross)
		} else {
			algo := h.model.ChooseAllreduce(len(block)*elemSize[T](), len(h.lv.cross))
			err = runAllreduce(cross, block, h.partial(), algo, h.seg)
		}
		if err != nil {
			return err
		}
	}
	finishReduce(h.red, block, h.op.Size())
	return nil
}

func (h *hierarchicalChunked[T]) gather(i int) error {
	c, blocks := h.chunk(i)
	gather := subOp(h.op, h.lv.local, hierarchicalGatherBase+uint32(i)*hierarchicalChunkSpan)
	return ringAllgather(gather, c, blocks, h.lv.localIndex, 0, h.seg)
}
