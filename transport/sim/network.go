package sim

import (
	"fmt"
	"math"
)

// Topology is the shape of the simulated network.
type Topology int

const (
	// Flat gives every rank a NIC of its own on a full-bisection network.
	Flat Topology = iota
	// Hosts puts RanksPerHost ranks on each host: they share the host's
	// NIC and talk to each other through shared memory.
	Hosts
	// FatTree is Hosts under a two-level fat tree: HostsPerSwitch hosts
	// per leaf switch, whose uplink carries HostsPerSwitch NICs' rate
	// divided by Oversubscription in each direction.
	FatTree
)

var topologyNames = [...]string{Flat: "flat", Hosts: "hosts", FatTree: "fattree"}

func (t Topology) String() string {
	if int(t) < len(topologyNames) {
		return topologyNames[t]
	}
	return fmt.Sprintf("topology(%d)", int(t))
}

// ParseTopology is the inverse of Topology.String.
func ParseTopology(s string) (Topology, error) {
	for i, n := range topologyNames {
		if n == s {
			return Topology(i), nil
		}
	}
	return 0, fmt.Errorf("unknown topology %q (flat, hosts, fattree)", s)
}

// link is one place where bytes are serialised: a NIC's egress or
// ingress, a rank's shared-memory port, a leaf switch's uplink or
// downlink. It is busy until free.
type link struct {
	name  string
	perB  float64 // seconds per byte
	free  float64
	bytes int64
}

// hop is one link on a message's path and the latency from the previous
// link to it.
type hop struct {
	link int
	lat  float64
}

// network holds the links and gives every pair of ranks its path.
type network struct {
	cfg   Config
	links []link
	// indices of each rank's first links (see newNetwork)
	egress, ingress, shmOut, shmIn []int
	up, down                       []int // per leaf switch
}

func newNetwork(cfg Config) *network {
	n := &network{cfg: cfg}
	add := func(name string, rate float64) int {
		n.links = append(n.links, link{name: name, perB: 1 / rate})
		return len(n.links) - 1
	}
	hosts := cfg.hosts()
	for h := range hosts {
		n.egress = append(n.egress, add(fmt.Sprintf("host %d egress", h), cfg.Rate))
		n.ingress = append(n.ingress, add(fmt.Sprintf("host %d ingress", h), cfg.Rate))
	}
	if cfg.Topology != Flat {
		for r := range cfg.Ranks {
			n.shmOut = append(n.shmOut, add(fmt.Sprintf("rank %d shm out", r), cfg.ShmRate))
			n.shmIn = append(n.shmIn, add(fmt.Sprintf("rank %d shm in", r), cfg.ShmRate))
		}
	}
	if cfg.Topology == FatTree {
		uplink := cfg.Rate * float64(cfg.HostsPerSwitch) / cfg.Oversubscription
		for s := range ceilDiv(hosts, cfg.HostsPerSwitch) {
			n.up = append(n.up, add(fmt.Sprintf("switch %d up", s), uplink))
			n.down = append(n.down, add(fmt.Sprintf("switch %d down", s), uplink))
		}
	}
	return n
}

// path is the links a message from src to dst crosses, in order.
func (n *network) path(src, dst int) []hop {
	c := n.cfg
	hs, hd := c.host(src), c.host(dst)
	if hs == hd {
		return []hop{{n.shmOut[src], 0}, {n.shmIn[dst], c.ShmLatency}}
	}
	if c.Topology == FatTree {
		ss, sd := hs/c.HostsPerSwitch, hd/c.HostsPerSwitch
		if ss != sd {
			return []hop{{n.egress[hs], 0}, {n.up[ss], 0}, {n.down[sd], 0}, {n.ingress[hd], c.Latency}}
		}
	}
	return []hop{{n.egress[hs], 0}, {n.ingress[hd], c.Latency}}
}

// busiest returns the link that carried the most bytes.
func (n *network) busiest() link {
	var b link
	for _, l := range n.links {
		if l.bytes > b.bytes {
			b = l
		}
	}
	return b
}

func (n *network) resetCounters() {
	for i := range n.links {
		n.links[i].bytes = 0
	}
}

// message is one send on its way through the links.
type message struct {
	path    []hop
	size    int    // payload bytes
	done    func() // completes the send
	prevEnd float64
	deliver func(at float64)
}

// cross moves m's head onto hop i at time head: the link serialises the
// bytes after the messages before it (cut-through: the head goes on to the
// next link after its latency, the tail cannot leave a link before it left
// the one before), then the next hop, or the delivery.
func (w *World) cross(m *message, i int, head float64) {
	h := m.path[i]
	l := &w.net.links[h.link]
	start := max(head, l.free)
	busy := float64(m.size) * l.perB
	end := max(start+busy, m.prevEnd+h.lat)
	// The link is busy for its own serialisation only: behind a slower
	// link the message trickles through, and the link carries other
	// messages' packets meanwhile (a fluid view of packet switching).
	l.free = start + busy
	if i == 0 {
		l.free = max(l.free, start+w.cfg.Gap)
		w.at(end, m.done)
	}
	l.bytes += int64(m.size)
	m.prevEnd = end
	if i+1 < len(m.path) {
		next := start + m.path[i+1].lat
		w.at(next, func() { w.cross(m, i+1, next) })
		return
	}
	m.deliver(end)
}

// cores are the machine's CPU cores (Config.Cores), each free from its
// time on; none means a core per goroutine. Work is requested in the
// order of virtual time (the scheduler runs the earliest goroutine), so
// giving each piece to the core that frees first is first come, first
// served.
type cores []float64

// run places d seconds of work requested at now on the core that frees
// first and returns when it ends.
func (c cores) run(now, d float64) float64 {
	if len(c) == 0 {
		return now + d
	}
	first := 0
	for i, free := range c {
		if free < c[first] {
			first = i
		}
	}
	end := max(now, c[first]) + d
	c[first] = end
	return end
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// validate checks cfg and fills in its defaults.
func (c *Config) validate() error {
	switch {
	case c.Ranks < 1:
		return fmt.Errorf("sim: %d ranks", c.Ranks)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("sim: rate %v bytes/s", c.Rate)
	case c.Latency < 0 || c.Overhead < 0 || c.Gap < 0:
		return fmt.Errorf("sim: negative latency, overhead or gap")
	case c.Cores < 0:
		return fmt.Errorf("sim: %d cores", c.Cores)
	case c.Topology < Flat || c.Topology > FatTree:
		return fmt.Errorf("sim: unknown topology %v", c.Topology)
	}
	if c.Topology == Flat {
		c.RanksPerHost = 1
	}
	if c.RanksPerHost < 1 {
		c.RanksPerHost = 1
	}
	if c.ShmRate <= 0 {
		c.ShmRate = DefaultShmRate
	}
	if c.ShmLatency <= 0 {
		c.ShmLatency = DefaultShmLatency
	}
	if c.Topology == FatTree {
		if c.HostsPerSwitch < 1 {
			c.HostsPerSwitch = max(1, int(math.Sqrt(float64(c.hosts()))))
		}
		if c.Oversubscription <= 0 {
			c.Oversubscription = 1
		}
	}
	if c.Compute.Mode == ComputeMeasured && c.Compute.Factor <= 0 {
		c.Compute.Factor = 1
	}
	return nil
}

func (c Config) host(rank int) int { return rank / c.RanksPerHost }
func (c Config) hosts() int        { return ceilDiv(c.Ranks, c.RanksPerHost) }
