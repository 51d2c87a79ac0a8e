package collectives

// Rabenseifner's allreduce: a reduce-scatter by recursive halving followed
// by an allgather by recursive doubling, on the largest power of two pof2
// <= P (the other ranks are folded in first and served last, see
// foldedGroup). It sends as few bytes as the ring, 2(pof2-1)/pof2 of the
// vector, in 2*log2(pof2) rounds instead of 2(P-1) steps.
//
// The vector is cut into pof2 balanced blocks (uneven sizes are fine).
// Halving, with mask = pof2/2 ... 1, new rank q and its partner q^mask each
// hold the blocks of the aligned window of 2*mask blocks around q; q keeps
// the half that contains block q, sends the other half and reduces the
// partner's copy of its own half into data. After the last round q holds
// the full result of block q. Doubling replays the rounds in reverse,
// mask = 1 ... pof2/2: q sends its aligned window of mask blocks and
// receives the partner's window straight into data.
//
// Steps: the halving and the doubling round with the same mask are the
// first and second transfers between the same two ranks (steps from 0 and
// from stepsPerRound); folded pairs never meet in those rounds.

// rabenseifnerAllreduce runs the algorithm on P >= 2 ranks.
func rabenseifnerAllreduce[T Float](op *Op, data []T, red ReduceOp, seg int) error {
	g := newFoldedGroup(op.Size())
	if err := fold(op, g, data, red, seg); err != nil {
		return err
	}
	if q := g.newRank(op.Rank()); q >= 0 {
		blocks := balanced(len(data), g.pof2)
		for mask := g.pof2 / 2; mask > 0; mask /= 2 {
			partner := q ^ mask
			keepLo, keepHi := blocks.blocks(q&^(mask-1), mask)
			sendLo, sendHi := blocks.blocks(partner&^(mask-1), mask)
			x := &transfer[T]{peer: g.oldRank(partner), step: roundStep(0), reduce: true, red: red,
				send: data[sendLo:sendHi], recv: data[keepLo:keepHi]}
			if err := x.run(op, seg); err != nil {
				return err
			}
		}
		// Block q is complete: an Avg divides it here, so each rank
		// divides one block and the doubling spreads the quotients.
		lo, hi := blocks.block(q)
		finishReduce(red, data[lo:hi], op.Size())
		for mask := 1; mask < g.pof2; mask *= 2 {
			partner := q ^ mask
			mineLo, mineHi := blocks.blocks(q&^(mask-1), mask)
			theirsLo, theirsHi := blocks.blocks(partner&^(mask-1), mask)
			x := &transfer[T]{peer: g.oldRank(partner), step: roundStep(1),
				send: data[mineLo:mineHi], recv: data[theirsLo:theirsHi]}
			if err := x.run(op, seg); err != nil {
				return err
			}
		}
	}
	return unfold(op, g, data, seg)
}
