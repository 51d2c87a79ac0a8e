package collectives

// Hierarchical reduce-scatter, on Op.Topo's H hosts of L ranks each: rank
// r ends with block r (m elements) of the reduction, as in the flat one.
//
//  1. Each rank copies in into a scratch vector ordered by local index,
//     then host: group l' holds, for every host h', the block of the rank
//     of local index l' on h'. Within each host the ring reduce-scatter of
//     the L groups leaves group l, summed over the host, on local rank l:
//     (L-1) messages of H m elements per rank.
//  2. Across hosts the H ranks of local index l reduce-scatter group l
//     (ring, block h' to the rank on host h'): (H-1) messages of m
//     elements per rank, every host's ranks on the network at once.
//
// Per host the network carries (H-1) L m elements out and in, what the
// flat ring moves across hosts at best, in (H-1) steps instead of (P-1).
// Avg runs as Sum and divides once at the end.
func hierarchicalReduceScatter[T Float](op *Op, in, out []T, red ReduceOp, seg int) error {
	lv, err := topologyLevels(op)
	if err != nil {
		return err
	}
	partial := red
	if red == Avg {
		partial = Sum
	}
	h, l, m := len(lv.cross), len(lv.local), len(out)
	scratch := op.Pool.Get(len(in) * elemSize[T]())
	byLocal := FromBytes[T](scratch)
	for l2 := range l {
		for h2 := range h {
			r := lv.at(h2, l2)
			copy(byLocal[(l2*h+h2)*m:(l2*h+h2+1)*m], in[r*m:(r+1)*m])
		}
	}
	group := byLocal[lv.localIndex*h*m : (lv.localIndex+1)*h*m]
	if l > 1 {
		if err := ringReduceScatter(subOpFixed(op, lv.local, 0), byLocal, group, partial, true, seg); err != nil {
			return err // scratch is dropped: a failed receive may still land in it
		}
	}
	if h > 1 {
		if err := ringReduceScatter(subOpFixed(op, lv.cross, 0), group, out, partial, false, seg); err != nil {
			return err
		}
	} else {
		copy(out, group)
	}
	op.Pool.Put(scratch)
	finishReduce(red, out, op.Size())
	return nil
}
