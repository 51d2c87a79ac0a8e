package transport

// Capabilities is what a transport can do beyond the Transport contract,
// as its Caps method reports it. The zero value is a transport that can
// do none of it: the layer above then falls back on the contract (Abort
// for FailLocal, FailOp for FailOpLocal, polling Err for Failed), or
// refuses what needs the capability (the per-peer failure model without
// Survive).
//
// A transport makes its Capabilities once, when it is created, and Caps
// returns that value: method values made at every call would be
// allocated on every operation, since the collectives read SegmentBytes
// per allreduce (BenchmarkCaps).
type Capabilities struct {
	// SegmentBytes is the size of the segments in which the transport
	// moves large messages best: the collectives cut their pipelined
	// transfers into segments of this size (0: no preference, the
	// collectives' default).
	SegmentBytes int

	// Failed, if not nil, is closed once the transport has failed (Err is
	// not nil): how a Route watches its parts without polling.
	Failed <-chan struct{}

	// FailLocal, if not nil, fails every pending and later request on
	// this rank with err, as losing a peer does, and tells no peer; the
	// transport's Close still says goodbye, carrying err. A Route makes a
	// peer lost on one of its transports fatal on all of them this way,
	// so that every other rank learns of the loss itself (each rank
	// reaches every other through one of its transports) instead of from
	// a cascade of closures naming whoever noticed first.
	FailLocal func(err error)

	// FailOpLocal, if not nil, fails operation (comm, seq) on this rank
	// only, without telling the peers (FailOp tells them): a rank that
	// saw a peer die fails its own operations that wait because of it,
	// and every other survivor does the same when it sees the death, so
	// each one's error names the dead rank rather than the first
	// survivor to notice.
	FailOpLocal func(comm uint32, seq uint64, err error)

	// Survive, if not nil, switches the transport to the per-peer
	// failure model that communicator shrinking needs (ULFM's
	// MPI_Comm_shrink and NCCL's ncclCommShrink assume the same of their
	// networks). By default a lost peer is sticky, as the Transport
	// contract says: everything pending and later fails. After Survive, a
	// lost peer (a broken connection, a protocol error, an Abort on its
	// side) fails only what involves it: pending and later sends to it
	// and receives from it, naming it; the connections to the other
	// ranks stay up and Err stays nil. lost is called once per lost
	// peer, from a goroutine of its own, so the layer above can fail the
	// operations that wait on other ranks because of the loss. A peer's
	// graceful Close is not a loss and does not call lost. Call Survive
	// before any operation.
	Survive func(lost func(peer int, err error))

	// The scheduling fields are for a transport that runs a rank's
	// goroutines itself: the simulator (transport/sim) runs one goroutine
	// of the whole job at a time, in virtual time, and must know every
	// goroutine of a rank and every wait between them, or a goroutine
	// blocked on a Go channel would hold up the job. Code inside a
	// collective reaches them only through the functions Go, NewSignal
	// and Work of this package, which fall back on plain goroutines,
	// plain requests and no accounting when they are nil: the same code
	// runs on TCP and in the simulator. A view of a transport passes them
	// through (ViewCaps).

	// Go, if not nil, starts fn as a goroutine of this rank and returns a
	// request that completes when fn returns.
	Go func(fn func()) *Request

	// NewSignal, if not nil, returns a pending request that a goroutine
	// of this rank completes (Request.Complete) for another to wait on.
	NewSignal func() *Request

	// Work, if not nil, prices computation in the transport's own time:
	// the calling goroutine just ran kernel k over bytes bytes.
	Work func(k Kernel, bytes int)
}

// ViewCaps is what a view of parent reports (a communicator's group of
// ranks, a derived communicator's transport, a counter of one
// operation's bytes): parent's scheduling fields (Go, NewSignal, Work),
// which its code must use to run on parent's scheduler, and no failure
// capability, since a view cannot fail the parent on its ranks' behalf,
// nor a segment size (the view's algorithms keep the collectives' own).
func ViewCaps(parent Transport) Capabilities {
	c := parent.Caps()
	return Capabilities{Go: c.Go, NewSignal: c.NewSignal, Work: c.Work}
}
