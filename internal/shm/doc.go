// Package shm is the shared-memory transport between the ranks of one
// host (and one network namespace): a transport.Transport for the peers
// of Config.Peers, meant to sit under a transport.Route with TCP or RDMA
// for the ranks of other hosts. It is available on Linux only; elsewhere
// New fails with ErrUnavailable.
//
// Memory. Each rank creates one inbox, an anonymous memfd (nothing in
// /dev/shm, and freed by the kernel with the last process that maps it,
// however the processes end), sealed so that it cannot shrink under a
// reader, and passes its descriptor to each peer over their unix socket
// (SCM_RIGHTS). An inbox holds one ring per peer, written by that peer
// and read by the owner, and a futex word that writers bump (layout.go).
// Memory is bounded: rings have a fixed size (Config.RingSize), and
// messages that arrive before their receive is posted take at most
// Config.UnexpectedLimit per peer; beyond it the owner stops reading that
// ring and the peer's sends wait once it is full.
//
// Messages. A message up to Config.SingleCopyLimit is a data frame,
// copied into the ring by the sender and out of it by the receiver,
// straight into the posted receive buffer when there is one (a message
// larger than the ring streams through it). A larger message costs one
// copy: the sender announces its buffers in a rendezvous frame and keeps
// them; once the receive is posted, the receiver reads the payload from
// the sender's memory into the receive buffer with process_vm_readv, as
// Open MPI's CMA path does, and marks the sender's slot done, which
// completes the send. Until then the message takes neither a buffer nor
// budget at the receiver. Where the kernel refuses cross-process reads
// (Yama ptrace_scope, containers, seccomp: each pair of ranks probes at
// set-up, and the choice is logged once), or with Config.NoSingleCopy,
// every message goes through the rings.
//
// Wake-ups. A waiting caller polls the rings itself for Config.Spin and
// then sleeps on the inbox's futex word (a caller locked to its thread, as
// one from C or Python is, polls without runtime.Gosched:
// transport.OnLockedThread); a progress goroutine polls for
// those who watch Done or poll Test, and sleeps on the same word when idle.
// A writer calls futexWake only when none of the owner's pollers is
// awake, so while both ranks are active no system call is made on either
// side, and an idle transport uses no CPU.
//
// Failures. Each pair's unix socket (abstract, so scoped to the network
// namespace) stays open as the liveness channel: the kernel closes it the
// moment a process dies, and a goroutine per peer, blocked reading it,
// fails the transport with a transport.PeerError naming the peer, failing
// every pending and later request. A graceful Close writes a goodbye after
// the last frame, so the peer delivers what came before and fails only
// what still involves the closed rank; Abort tells each peer at once over
// its socket. A send to a peer that has begun to close waits for that
// goodbye (or the peer's death) and fails with the reason it carries,
// never with a bare "closed" that would hide why the peer closed.
// Receives are matched by the shared transport.Matcher.
package shm
