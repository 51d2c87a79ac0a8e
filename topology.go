package sparcml

import "github.com/sparcml/sparcml/collectives"

// collTopology is the topology as the collectives take it, for the
// hierarchical algorithms; nil for a communicator whose hosts are not
// known rank by rank.
func (c *Comm) collTopology() *collectives.Topology { return c.topo.Coll(c.Size()) }

// Host is the index of this rank's host, in [0, Hosts()): ranks with the
// same index run on the same machine and in the same network namespace,
// so they can share memory. Hosts are numbered in the order of their
// lowest rank (rank 0's host is 0). A communicator made by Local or
// NewComm puts every rank on host 0.
func (c *Comm) Host() int { return c.topo.HostOf[c.Rank()] }

// Hosts is the number of hosts the job runs on.
func (c *Comm) Hosts() int { return c.topo.Hosts }

// HostOf is the index of rank's host (-1 for a rank out of range).
func (c *Comm) HostOf(rank int) int {
	if rank < 0 || rank >= len(c.topo.HostOf) {
		return -1
	}
	return c.topo.HostOf[rank]
}

// LocalRanks lists the ranks on this rank's host, ascending, this rank
// included.
func (c *Comm) LocalRanks() []int { return c.topo.RanksOn(c.Host()) }
