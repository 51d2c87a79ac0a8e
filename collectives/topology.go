package collectives

import (
	"fmt"
	"sync"
)

// Topology says which host each rank of a communicator runs on, for the
// collectives that follow the hierarchy (reduce within a host, cross the
// network once per host, share within the host). Every rank must pass an
// equal Topology. Hosts[r] is rank r's host, an index in [0, H).
//
// Hosts must not change once the topology is in use: its grouping by host
// is computed once (shape), as every operation of a communicator shares
// it.
type Topology struct {
	Hosts []int

	once     sync.Once
	byHost   [][]int // the ranks of every host, in rank order
	shapeErr error   // why Hosts has no two levels
}

// levels is one rank's place in a two-level topology: the ranks of its
// host (local, in rank order) and the ranks that share its index on every
// host (cross, in host order). It is only defined when every host holds
// the same number of ranks, so that every cross group has one rank per
// host and the blocks of a vector map one to one onto cross groups.
type levels struct {
	local, cross []int
	localIndex   int     // this rank's index in local
	hostIndex    int     // this rank's index in cross
	hosts        [][]int // the ranks of every host, in rank order
}

// at returns the rank of local index l on host h.
func (lv levels) at(h, l int) int { return lv.hosts[h][l] }

// twoLevels returns rank's levels, or an error saying why the topology
// has none (wrong length, a host index out of range or unused, hosts of
// different sizes).
func (t *Topology) twoLevels(rank int) (levels, error) {
	p := len(t.Hosts)
	if rank < 0 || rank >= p {
		return levels{}, fmt.Errorf("topology of %d ranks has no rank %d", p, rank)
	}
	byHost, err := t.shape()
	if err != nil {
		return levels{}, err
	}
	var lv levels
	host := t.Hosts[rank]
	lv.local = byHost[host]
	for i, r := range lv.local {
		if r == rank {
			lv.localIndex = i
		}
	}
	lv.hostIndex = host
	lv.hosts = byHost
	lv.cross = make([]int, len(byHost))
	for h, g := range byHost {
		lv.cross[h] = g[lv.localIndex]
	}
	return lv, nil
}

// shape returns the ranks of every host, the same number on each, or why
// the hosts are not so; computed at the first call.
func (t *Topology) shape() ([][]int, error) {
	t.once.Do(func() {
		byHost := t.groups()
		if byHost == nil {
			t.shapeErr = fmt.Errorf("topology: host indices must be 0..H-1, each used, got %v", t.Hosts)
			return
		}
		per := len(byHost[0])
		for h, g := range byHost {
			if len(g) != per {
				t.shapeErr = fmt.Errorf("topology: host 0 runs %d ranks but host %d runs %d (the hierarchical algorithms need the same number on every host)", per, h, len(g))
				return
			}
		}
		t.byHost = byHost
	})
	return t.byHost, t.shapeErr
}

// groups returns the ranks of each host in rank order, or nil when the
// host indices are not exactly 0..H-1.
func (t *Topology) groups() [][]int {
	h := 0
	for _, x := range t.Hosts {
		if x < 0 || x >= len(t.Hosts) {
			return nil
		}
		h = max(h, x+1)
	}
	byHost := make([][]int, h)
	for r, x := range t.Hosts {
		byHost[x] = append(byHost[x], r)
	}
	for _, g := range byHost {
		if len(g) == 0 {
			return nil
		}
	}
	return byHost
}

// hierarchical reports whether the topology has two levels worth using:
// several hosts, several ranks on each, the same number on every host.
func (t *Topology) hierarchical() bool {
	if t == nil || len(t.Hosts) == 0 {
		return false
	}
	byHost, err := t.shape()
	return err == nil && len(byHost) > 1 && len(byHost[0]) > 1
}
