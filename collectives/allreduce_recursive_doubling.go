package collectives

// Recursive-doubling allreduce, for small vectors: log2(pof2) rounds in
// which new rank q exchanges its whole vector with q^mask (mask = 1, 2, 4,
// ...) and reduces the partner's copy into its own, on the largest power
// of two pof2 <= P (the other ranks are folded in first and served last,
// see foldedGroup). Latency is minimal (log2 P rounds) but every round
// sends the full vector, so it loses to the ring and Rabenseifner once the
// vector is more than a few kilobytes.
//
// Sum is commutative in IEEE arithmetic, so q and its partner compute
// bit-identical partial results even though each adds the other's vector
// to its own.
//
// Every round pairs different ranks, so each exchange starts at step 0.

// recursiveDoublingAllreduce runs the algorithm on P >= 2 ranks.
func recursiveDoublingAllreduce[T Float](op *Op, data []T, red ReduceOp, seg int) error {
	g := newFoldedGroup(op.Size())
	if err := fold(op, g, data, red, seg); err != nil {
		return err
	}
	if q := g.newRank(op.Rank()); q >= 0 {
		for mask := 1; mask < g.pof2; mask *= 2 {
			// The vector is sent and reduced into at once: transfer waits
			// for each segment's send before reducing into it.
			x := &transfer[T]{peer: g.oldRank(q ^ mask), step: roundStep(0), reduce: true, red: red,
				send: data, recv: data, inPlace: true}
			if err := x.run(op, seg); err != nil {
				return err
			}
		}
		finishReduce(red, data, op.Size()) // every active rank holds the whole sum
	}
	return unfold(op, g, data, seg)
}
