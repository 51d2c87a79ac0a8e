package collectives

// Hierarchical broadcast, on Op.Topo's H hosts of L ranks each, from root
// (on host hr, local index lr):
//
//  1. Across hosts the H ranks of local index lr, root among them,
//     broadcast from root with the flat algorithm the size picks: the
//     vector crosses each host's link once.
//  2. Within each host the rank of local index lr broadcasts to the
//     others, on every host at once.
//
// The other cross groups are idle in step 1: a broadcast has one source,
// and splitting it among them would send each of its pieces across the
// network once all the same.
func hierarchicalBroadcast[T Float](op *Op, data []T, root, seg int) error {
	lv, err := topologyLevels(op)
	if err != nil {
		return err
	}
	rootHost := op.Topo.Hosts[root]
	rootLocal := 0
	for i, r := range lv.hosts[rootHost] {
		if r == root {
			rootLocal = i
		}
	}
	bytes := len(data) * elemSize[T]()
	if h := len(lv.cross); h > 1 && lv.localIndex == rootLocal {
		algo := DefaultCostModel.ChooseBroadcast(bytes, h)
		if err := runBroadcast(subOpFixed(op, lv.cross, 0), data, rootHost, algo, seg); err != nil {
			return err
		}
	}
	if l := len(lv.local); l > 1 {
		algo := DefaultCostModel.ChooseBroadcast(bytes, l)
		return runBroadcast(subOpFixed(op, lv.local, 0), data, rootLocal, algo, seg)
	}
	return nil
}
