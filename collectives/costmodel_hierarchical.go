package collectives

import "math"

// chooseAllreduceOn is ChooseAllreduce on the hosts of topo: the
// hierarchical allreduce competes with the flat algorithms when the
// topology has two levels and the model knows the local link
// (LocalAlpha, LocalBeta); otherwise the flat choice.
func (m CostModel) chooseAllreduceOn(topo *Topology, bytes, p int) Algo {
	flat := m.ChooseAllreduce(bytes, p)
	if m.LocalBeta <= 0 || !topo.hierarchical() || len(topo.Hosts) != p {
		return flat
	}
	if m.hierarchicalTime(topo, bytes) < m.allreduceTime(flat, bytes, p) {
		return AlgoHierarchical
	}
	return flat
}

// PredictAllreduceOn is PredictAllreduce's time on the hosts of topo
// (nil: one rank per host), where AlgoHierarchical is priced and AlgoAuto
// resolves as Allreduce resolves it on an Op with that topology.
func (m CostModel) PredictAllreduceOn(a Algo, topo *Topology, bytes, p int) float64 {
	if a == AlgoAuto {
		a = m.chooseAllreduceOn(topo, bytes, p)
	}
	if a == AlgoHierarchical {
		if !topo.hierarchical() || len(topo.Hosts) != p {
			return math.Inf(1)
		}
		return m.hierarchicalTime(topo, bytes)
	}
	return m.allreduceTime(a, bytes, p)
}

// hierarchicalTime is the modelled time of hierarchicalAllreduce: for
// each of its K chunks of c bytes, the ring reduce-scatter and allgather
// of c bytes among the L ranks of a host on the local link, and the best
// flat allreduce of c/L bytes among the H hosts on the network. The
// phases are pipelined over the chunks, so the whole takes one chunk
// through every phase plus K-1 more of the slowest phase. The flat
// algorithms are modelled on the network's link alone, which is what
// binds them when every ring or butterfly crosses hosts.
func (m CostModel) hierarchicalTime(topo *Topology, bytes int) float64 {
	byHost, err := topo.shape()
	if err != nil {
		return math.Inf(1)
	}
	chunks := hierarchicalChunks(bytes)
	c, l := float64(bytes)/float64(chunks), float64(len(byHost[0]))
	share := int(math.Ceil(c / l))
	intra := (l-1)*m.LocalAlpha + (l-1)/l*c*m.LocalBeta
	reduceScatter := intra + (l-1)/l*c*m.Gamma
	h := len(byHost)
	cross := m.allreduceTime(m.ChooseAllreduce(share, h), share, h)
	slowest := max(reduceScatter, cross, intra)
	return reduceScatter + cross + intra + float64(chunks-1)*slowest
}
