package collectives

// Hierarchical allgather, on Op.Topo's H hosts of L ranks each: out holds
// every rank's in (m elements) in rank order, as in the flat one.
//
//  1. Across hosts the H ranks of local index l allgather their inputs:
//     (H-1) blocks of m elements per rank, every host's ranks on the
//     network at once, so each host's link carries (H-1) L m elements in
//     and out: each block crosses it once.
//  2. Within each host the L ranks allgather what step 1 gave them
//     (blocks of H m elements), into a scratch vector ordered by local
//     index, then host.
//  3. Each rank copies the scratch into out in rank order.
//
// Both steps use the flat allgather the size picks (recursive doubling
// up to 512 KiB in all, the ring beyond).
func hierarchicalAllgather[T Float](op *Op, in, out []T, seg int) error {
	lv, err := topologyLevels(op)
	if err != nil {
		return err
	}
	h, l, m := len(lv.cross), len(lv.local), len(in)
	scratch := op.Pool.Get(len(out) * elemSize[T]())
	byLocal := FromBytes[T](scratch)
	if len(out) == 0 {
		byLocal = nil
	}
	group := byLocal[lv.localIndex*h*m : (lv.localIndex+1)*h*m]
	cross := subOpFixed(op, lv.cross, 0)
	algo := resolveAllgather(AlgoAuto, len(group)*elemSize[T](), h)
	if err := allgatherLayout(cross, in, group, balanced(len(group), h), algo, seg); err != nil {
		return err // scratch is dropped: a failed receive may still land in it
	}
	local := subOpFixed(op, lv.local, 0)
	algo = resolveAllgather(AlgoAuto, len(byLocal)*elemSize[T](), l)
	if err := allgatherLayout(local, group, byLocal, balanced(len(byLocal), l), algo, seg); err != nil {
		return err
	}
	for l2 := range l {
		for h2 := range h {
			r := lv.at(h2, l2)
			copy(out[r*m:(r+1)*m], byLocal[(l2*h+h2)*m:(l2*h+h2+1)*m])
		}
	}
	op.Pool.Put(scratch)
	return nil
}
