// Package topology is where the ranks of a job run: the host of every
// rank, learned at Init from every rank's bootstrap.HostKey (machine and
// network namespace), with hosts numbered in the order of their lowest
// rank.
package topology

import (
	"fmt"
	"strings"

	"github.com/sparcml/sparcml/collectives"
)

// Topology is the host index of each rank of a communicator.
type Topology struct {
	HostOf []int
	Hosts  int
	coll   *collectives.Topology // HostOf for the collectives, made once
}

// OneHost is the topology of a job inside one process (Local) or of one
// whose transport was connected by someone else (NewComm).
func OneHost(size int) Topology { return New(make([]int, size)) }

// New is the topology of ranks on the hosts hostOf.
func New(hostOf []int) Topology {
	n := 0
	for _, h := range hostOf {
		n = max(n, h+1)
	}
	return Topology{HostOf: hostOf, Hosts: n, coll: &collectives.Topology{Hosts: hostOf}}
}

// Coll is the topology as the collectives take it, for the hierarchical
// algorithms; nil unless it names the host of each of size ranks. It is
// one value per topology, so that its grouping by host is computed once,
// not per operation.
func (t Topology) Coll(size int) *collectives.Topology {
	if len(t.HostOf) != size {
		return nil
	}
	return t.coll
}

// RanksOn lists the ranks on host h, ascending.
func (t Topology) RanksOn(h int) []int {
	var rs []int
	for r, hr := range t.HostOf {
		if hr == h {
			rs = append(rs, r)
		}
	}
	return rs
}

// Sub is t restricted to the ranks group, in their new order, with the
// hosts renumbered in the order of their lowest new rank.
func (t Topology) Sub(group []int) Topology {
	renum := make(map[int]int)
	hostOf := make([]int, len(group))
	for i, r := range group {
		h := 0
		if r < len(t.HostOf) {
			h = t.HostOf[r]
		}
		if _, seen := renum[h]; !seen {
			renum[h] = len(renum)
		}
		hostOf[i] = renum[h]
	}
	return New(hostOf)
}

// Describe lists the ranks of each host: "host 0: ranks 0-1; host 1: ranks 2-3".
func (t Topology) Describe() string {
	var hs []string
	for h := range t.Hosts {
		rs := t.RanksOn(h)
		hs = append(hs, fmt.Sprintf("host %d: rank%s %s", h, Plural(len(rs)), RankRanges(rs)))
	}
	return strings.Join(hs, "; ")
}

// RankRanges writes ranks (ascending) as ranges: "1-3,6".
func RankRanges(ranks []int) string {
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

// Plural is "s" unless n is 1.
func Plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
