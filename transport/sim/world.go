package sim

import (
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Defaults of the shared memory between ranks of one host (Config).
const (
	DefaultShmRate    = 10e9   // bytes/s: one memcpy stream
	DefaultShmLatency = 0.5e-6 // seconds
)

// ComputeMode says how the work between messages is charged in virtual
// time.
type ComputeMode int

const (
	// ComputeModel charges the bytes every reduction and merge of the
	// collectives reports (transport.Work) at the cost model's rate for
	// its kernel (Compute.Gamma for dense reductions and scatter-adds,
	// Compute.SparseGamma for sparse merges), to the goroutine that ran
	// it. Deterministic.
	ComputeModel ComputeMode = iota
	// ComputeMeasured charges the CPU time of the process while a
	// goroutine ran between two calls into the transport (only one runs
	// at a time, so that is its CPU time, the garbage collection of what
	// it allocated included), times Compute.Factor.
	ComputeMeasured
	// ComputeNone charges nothing: only the network takes time.
	ComputeNone
)

var computeNames = [...]string{ComputeModel: "model", ComputeMeasured: "measured", ComputeNone: "none"}

func (m ComputeMode) String() string {
	if int(m) < len(computeNames) {
		return computeNames[m]
	}
	return fmt.Sprintf("compute(%d)", int(m))
}

// ParseComputeMode is the inverse of ComputeMode.String.
func ParseComputeMode(s string) (ComputeMode, error) {
	for i, n := range computeNames {
		if n == s {
			return ComputeMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown compute mode %q (model, measured, none)", s)
}

// Compute is how computation is charged.
type Compute struct {
	Mode ComputeMode
	// Gamma and SparseGamma are seconds per byte reduced, densely and by
	// merging sparse streams (ComputeModel).
	Gamma, SparseGamma float64
	// Factor scales measured time (ComputeMeasured; 0 means 1).
	Factor float64
}

// Config is the simulated machine.
type Config struct {
	Ranks int
	// Rate is every NIC's rate in bytes per second, the same on egress
	// and ingress (LogGP's G is its inverse).
	Rate float64
	// Latency is the network's latency in seconds (LogGP's L).
	Latency float64
	// Overhead is the CPU time of sending a message and of receiving
	// one (LogGP's o), charged to the sender before the message leaves
	// and to the receiver before its receive completes.
	Overhead float64
	// Gap is the least time between two messages leaving one NIC
	// (LogGP's g).
	Gap float64

	Topology Topology
	// RanksPerHost share a NIC (Hosts, FatTree); ranks r / RanksPerHost
	// are on one host.
	RanksPerHost int
	// ShmRate (bytes/s) and ShmLatency (s) are the shared memory between
	// ranks of a host; 0 means DefaultShmRate and DefaultShmLatency.
	ShmRate, ShmLatency float64
	// HostsPerSwitch (0: the square root of the hosts) and
	// Oversubscription (0: 1) shape the fat tree.
	HostsPerSwitch   int
	Oversubscription float64

	Compute Compute
	// Cores is the number of CPU cores every rank's charged time
	// (Compute, a send's Overhead) runs on, shared by the whole job,
	// first come first served: the one machine of an emulated cluster,
	// whose hosts take turns on its cores. 0 gives every goroutine a
	// core of its own.
	Cores int
	// SegmentBytes is the segment size the transport asks the
	// collectives for (transport.Capabilities.SegmentBytes); 0 leaves their default.
	SegmentBytes int
}

// World is one simulated job: its transports, its network and its clock.
// Everything in it runs under the scheduler (sched.go), one goroutine at
// a time, so it needs no locks.
type World struct {
	cfg   Config
	net   *network
	ranks []*Transport

	now     float64
	seq     uint64
	events  eventHeap
	runq    runQueue
	cur     *gor
	gid     uint64
	live    int
	waiting map[*transport.Request]waiter
	waitSeq uint64
	idle    chan struct{}
	panics  []any
	compute Compute
	cpu     cores
}

// New returns a world of cfg.Ranks connected transports.
func New(cfg Config) (*World, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &World{cfg: cfg, net: newNetwork(cfg), waiting: make(map[*transport.Request]waiter),
		idle: make(chan struct{}, 1), compute: cfg.Compute, cpu: make(cores, cfg.Cores)}
	for r := range cfg.Ranks {
		t := &Transport{w: w, rank: r, m: transport.NewMatcher(r, 0)}
		t.caps = transport.Capabilities{SegmentBytes: cfg.SegmentBytes, Go: t.goFn, NewSignal: t.newSignal, Work: t.work}
		w.ranks = append(w.ranks, t)
	}
	return w, nil
}

// Config returns the world's configuration, defaults filled in.
func (w *World) Config() Config { return w.cfg }

// Transport returns rank's transport.
func (w *World) Transport(rank int) *Transport { return w.ranks[rank] }

// Now is the virtual time in seconds.
func (w *World) Now() float64 { return w.now }

// Run runs fn on every rank, in virtual time from Now, and returns when
// every goroutine of the job has returned, with the virtual time at which
// each rank's fn returned. A panic in fn is returned as an error (after
// every other goroutine finished or deadlocked).
func (w *World) Run(fn func(t *Transport)) ([]float64, error) {
	if w.cur != nil {
		return nil, fmt.Errorf("sim: Run called from inside the simulated job")
	}
	ends := make([]float64, len(w.ranks))
	for r, t := range w.ranks {
		w.spawn(r, func() {
			fn(t)
			w.enter()
			ends[r] = w.now
		})
	}
	w.panics = nil
	if first := w.next(); first != nil {
		first.wake <- struct{}{}
		<-w.idle
	}
	if len(w.panics) > 0 {
		return ends, fmt.Errorf("sim: %d goroutines panicked, the first with: %v", len(w.panics), w.panics[0])
	}
	return ends, nil
}

// Link is one link's name and the payload bytes it carried.
type Link struct {
	Name  string
	Bytes int64
}

// Busiest returns the link that carried the most bytes since the last
// ResetCounters.
func (w *World) Busiest() Link {
	l := w.net.busiest()
	return Link{Name: l.name, Bytes: l.bytes}
}

// ResetCounters zeroes the links' byte counts (not the transports'
// statistics, which count from their creation as on every transport).
func (w *World) ResetCounters() { w.net.resetCounters() }
