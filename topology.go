package sparcml

import (
	"fmt"
	"strings"

	"github.com/sparcml/sparcml/collectives"
)

// topology is where the ranks of a job run: the host index of each rank,
// learned at Init from every rank's bootstrap.HostKey (machine and network
// namespace). Hosts are numbered in the order of their lowest rank.
type topology struct {
	hostOf []int
	hosts  int
	coll   *collectives.Topology // hostOf for the collectives, made once
}

// oneHost is the topology of a job inside one process (Local) or of one
// whose transport was connected by someone else (NewComm).
func oneHost(size int) topology { return newTopology(make([]int, size)) }

func newTopology(hostOf []int) topology {
	n := 0
	for _, h := range hostOf {
		n = max(n, h+1)
	}
	return topology{hostOf: hostOf, hosts: n, coll: &collectives.Topology{Hosts: hostOf}}
}

// collTopology is the topology as the collectives take it, for the
// hierarchical algorithms; nil for a communicator whose hosts are not
// known rank by rank. It is the communicator's one value, so that its
// grouping by host is computed once, not per operation.
func (c *Comm) collTopology() *collectives.Topology {
	if len(c.topo.hostOf) != c.Size() {
		return nil
	}
	return c.topo.coll
}

// ranksOn lists the ranks on host h, ascending.
func (t topology) ranksOn(h int) []int {
	var rs []int
	for r, hr := range t.hostOf {
		if hr == h {
			rs = append(rs, r)
		}
	}
	return rs
}

// Host is the index of this rank's host, in [0, Hosts()): ranks with the
// same index run on the same machine and in the same network namespace,
// so they can share memory. Hosts are numbered in the order of their
// lowest rank (rank 0's host is 0). A communicator made by Local or
// NewComm puts every rank on host 0.
func (c *Comm) Host() int { return c.topo.hostOf[c.Rank()] }

// Hosts is the number of hosts the job runs on.
func (c *Comm) Hosts() int { return c.topo.hosts }

// HostOf is the index of rank's host (-1 for a rank out of range).
func (c *Comm) HostOf(rank int) int {
	if rank < 0 || rank >= len(c.topo.hostOf) {
		return -1
	}
	return c.topo.hostOf[rank]
}

// LocalRanks lists the ranks on this rank's host, ascending, this rank
// included.
func (c *Comm) LocalRanks() []int { return c.topo.ranksOn(c.Host()) }

// rankRanges writes ranks (ascending) as ranges: "1-3,6".
func rankRanges(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", ranks[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		}
		i = j + 1
	}
	return b.String()
}
