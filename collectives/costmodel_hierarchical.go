package collectives

import "math"

// chooseAllreduceOn is ChooseAllreduce on the hosts of topo: the
// hierarchical allreduce competes with the flat algorithms when the
// topology has two levels and the model knows the local link
// (LocalAlpha, LocalBeta); otherwise the flat choice.
func (m CostModel) chooseAllreduceOn(topo *Topology, bytes, p int) Algo {
	if m.LocalBeta <= 0 || !topo.hierarchical() || len(topo.Hosts) != p {
		return m.ChooseAllreduce(bytes, p)
	}
	best, bestTime := AlgoHierarchical, m.hierarchicalTime(topo, bytes)
	for _, a := range allreduceAlgos {
		if t := m.allreduceTimeOn(topo, a, bytes, p); t < bestTime {
			best, bestTime = a, t
		}
	}
	return best
}

// allreduceTimeOn is allreduceTime on the hosts of topo, whose ranks
// share one network link per host. When every host holds a contiguous
// block of l ranks, l and p powers of two, the butterflies of
// Rabenseifner and recursive doubling exchange within a host in their
// rounds of distance below l (on the local link) and across hosts in
// the others, where all l ranks of a host send at once through its link:
// such a round moves l times a rank's bytes through it. The ring crosses
// a host boundary once per host in each direction: see ringTimeOn.
// Otherwise the flat model.
func (m CostModel) allreduceTimeOn(topo *Topology, a Algo, bytes, p int) float64 {
	l := contiguousHostSize(topo, p)
	if l > 1 && a == AlgoRing {
		return m.ringTimeOn(bytes, p, l)
	}
	if l <= 1 || p&(p-1) != 0 || (a != AlgoRabenseifner && a != AlgoRecursiveDoubling) {
		return m.allreduceTime(a, bytes, p)
	}
	n, P := float64(bytes), float64(p)
	seconds := 0.0
	for d := 1; d < p; d *= 2 {
		alpha, beta, share := m.LocalAlpha, m.LocalBeta, 1.0
		if d >= l {
			alpha, beta, share = m.Alpha, m.Beta, float64(l)
		}
		if a == AlgoRecursiveDoubling {
			seconds += alpha + share*n*beta + n*m.Gamma
			continue
		}
		// The reduce-scatter's round of distance d sends n*d/P, and so
		// does the allgather's.
		seconds += 2 * (alpha + share*n*float64(d)/P*beta)
	}
	if a == AlgoRabenseifner {
		seconds += (P - 1) / P * n * m.Gamma
	}
	return seconds
}

// ringTimeOn is the ring allreduce over hosts of l consecutive ranks:
// each of its 2(P-1) steps sends one block of n/P bytes through every
// host's link, and a block's way around the ring crosses a host boundary
// every l steps, on the local link otherwise. The link's bytes and that
// path (its latencies, bytes and the reductions on it) overlap: the
// slower of the two.
func (m CostModel) ringTimeOn(bytes, p, l int) float64 {
	steps, b := 2*float64(p-1), float64(bytes)/float64(p)
	link := steps * b * m.Beta
	cross := steps / float64(l)
	path := cross*(m.Alpha+b*m.Beta) + (steps-cross)*(m.LocalAlpha+b*m.LocalBeta) + float64(p-1)*b*m.Gamma
	return max(link, path)
}

// contiguousHostSize is the number of ranks on each host of topo when
// host h holds exactly ranks h*l .. h*l+l-1 with l a power of two, else 0.
func contiguousHostSize(topo *Topology, p int) int {
	byHost, err := topo.shape()
	if err != nil || len(topo.Hosts) != p {
		return 0
	}
	l := len(byHost[0])
	if l&(l-1) != 0 {
		return 0
	}
	for r, h := range topo.Hosts {
		if h != r/l {
			return 0
		}
	}
	return l
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
	if m.LocalBeta > 0 && topo.hierarchical() {
		return m.allreduceTimeOn(topo, a, bytes, p)
	}
	return m.allreduceTime(a, bytes, p)
}

// hierarchicalTime is the modelled time of hierarchicalAllreduce: for
// each of its K chunks of c bytes, the ring reduce-scatter and allgather
// of c bytes among the L ranks of a host on the local link, and the best
// flat allreduce of c/L bytes among the H hosts on the network. The
// phases are pipelined over the chunks, so the whole takes one chunk
// through every phase plus K-1 more of the slowest phase. The L ranks of
// a host run their cross-host allreduces at once, each on its c/L bytes,
// through the host's one link: the flat algorithm is priced with L times
// the network's Beta.
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
	shared := m // the algorithm is the one hierarchicalAllreduce chooses, on m
	shared.Beta *= l
	cross := shared.allreduceTime(m.ChooseAllreduce(share, h), share, h)
	slowest := max(reduceScatter, cross, intra)
	return reduceScatter + cross + intra + float64(chunks-1)*slowest
}
