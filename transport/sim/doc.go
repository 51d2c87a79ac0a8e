// Package sim is a transport over a simulated network in virtual time: the
// library's own collective code runs on it unchanged, with real data and
// real reductions, at up to thousands of ranks in one process, and every
// run of the same inputs gives the same virtual times (`sparcml sim`).
//
// # Design
//
// A discrete-event scheduler runs the job one goroutine at a time, always
// the one with the earliest virtual time, after firing every network event
// due before it. A goroutine gives the world up when it waits on a
// request, is charged time, or returns; its clock then jumps to the
// completion that wakes it. Ties break by event order and goroutine start
// order, so a run is deterministic. A job in which every goroutine waits
// with nothing in flight would hang on a network: here its waits fail with
// ErrDeadlock.
//
// The scheduler must know every goroutine of a rank and every wait between
// them: a goroutine blocked on a Go channel, unseen, would keep the world.
// The collectives start their goroutines and hand work between them
// through transport.Go and transport.NewSignal (the hierarchical chunk
// pipeline does), which this transport provides (Capabilities.Go and
// NewSignal) and which are plain goroutines and requests on every other transport, so
// the code is the same on TCP and here.
//
// The alternative, LogGOPSim's record-then-replay (run over the in-memory
// transport recording each rank's sends, receives and computation, then
// replay the schedule through a network model), was not chosen: the
// recorded order is the order of the real run, not of the simulated one,
// so it is exact only for code whose control flow does not depend on
// timing, and the ring polls its requests (Request.Test) to decide what
// to do next; the pipeline's stages would need a trace per goroutine and
// their channel hand-offs as dependencies; and the trace of a 1024-rank
// job is held or written in full before the replay starts. Running in
// virtual time costs one goroutine switch per wait, and needs no trace.
//
// # Network model
//
// LogGP with contention at every link: a send costs the sender Overhead
// (o) of CPU; its bytes are serialised at the NIC's rate (G = 1/Rate) on
// the sender's egress after the messages before it, with at least Gap (g)
// between two messages leaving; the head crosses the network in Latency
// (L) and the bytes are serialised again on the receiver's ingress, again
// after the messages before them (cut-through: a message alone costs
// L + n·G). A link is busy for its own serialisation only: behind a
// slower link a message trickles through while the link carries others
// (a fluid view of packet switching). The send completes when its last
// byte has left the egress; the receive, Overhead after its last byte
// arrived. With Hosts, the ranks of
// a host share one NIC and reach each other through shared memory, a port
// per rank at ShmRate after ShmLatency; with FatTree, messages between
// leaf switches also cross the source switch's uplink and the destination
// switch's downlink, each HostsPerSwitch·Rate/Oversubscription.
//
// Computation is charged by Compute.Mode: ComputeModel (the default)
// charges the bytes each reduction and merge of the collectives reports
// (transport.Work, a no-op on other transports) at the cost model's kernel
// rate (Gamma dense, SparseGamma sparse) to the goroutine that ran it;
// ComputeMeasured charges the process's CPU time while a goroutine ran
// between two transport calls (only one runs at a time); ComputeNone
// charges nothing, for the closed forms of docs/ALGORITHMS.md. With
// Cores, every charge (computation and a send's Overhead) runs on one of
// Cores cores shared by the whole job, first come first served: the one
// machine an emulated cluster's hosts share.
package sim
