// Package fallback is sparcml's TCP transport, used where there is no RDMA
// and as the reference the RDMA transport is tested against. It implements
// transport.Transport over a full mesh of TCP connections.
//
// # Setup
//
// Each rank listens on Config.ListenIP, publishes its address in the job's
// store under "tcp/addr/<rank>", dials every lower rank and accepts every
// higher one, Config.ConnsPerPeer connections per pair. Every connection
// first runs bootstrap.Authenticate with the job token (the dialer is the
// client), then both sides exchange a hello (wire.Hello's magic,
// protocol version, rank and job size, then the connection index and
// connections per peer: hello.go) and check it.
// A connection that fails either step is refused and logged and the job
// goes on; a stranger cannot take a slot or stall the setup. The listener
// closes once the mesh is complete. Every rank is connected to every other
// so that each notices any peer's death itself.
//
// # Data path
//
// Every frame is a fixed 56-byte header and a payload (the header is
// internal/wire's, which the shared-memory transport uses too).
// Send goes to the connection its tag hashes to (one message never
// splits, and messages on one connection stay in order). When that
// connection is idle, Send writes the frame itself with one non-blocking
// vectored write (header and the caller's buffers, no copy) and completes
// the request at once if the kernel took it all; otherwise (something
// queued or being written, a frame the socket buffer cannot take, or one
// above 1 MiB) the connection's writer goroutine writes it, so Send never
// waits for the peer. A request completes when its bytes are in the
// kernel. Whoever reads a connection (see below) reads a header, asks the
// receive matcher where the payload goes and reads it there: straight into
// the posted receive buffer when the receive is posted (zero-copy), into a
// pooled buffer otherwise; for a large payload it raises the socket's
// receive low-water mark first, so it wakes once per large chunk rather
// than once per segment, and ends it with a readv that also fills the
// reader's buffer with whatever frames follow. When
// a peer's budget of unexpected bytes is used up the reader stops reading
// that connection until receives are posted, and TCP flow control stops
// the sender: memory stays bounded.
//
// # Who reads
//
// A goroutine that waits for a receive reads the connection itself when
// nobody else is, delivering every frame it meets until its own message
// is in, so the data wakes the waiting caller directly, as with a plain
// net.Conn; a reader goroutine handing each message to its waiter would
// cost a goroutine wake-up per message, which in Go also wakes an idle
// thread. Each connection also has a background reader, which reads when
// nobody waits: for receives watched through Done, for a Wait on a send
// the socket has not taken, and when the watchdog finds the connection
// unread (every 100 ms), so a peer's death is noticed even while nobody
// waits on it. Reads are resumable at any byte (a waiter whose deadline
// passes mid-frame leaves the rest to the next reader). See readshare.go.
//
// # Failures
//
// A read or write error, or the end of a connection, makes the transport
// fail with a sticky *transport.PeerError of kind transport.ErrPeerLost
// naming the peer; a malformed frame, one of kind transport.ErrProtocol.
// Every pending and later request fails with it. A peer that closes its
// transport sends a goodbye first, so the error says it closed rather than
// crashed; if the transport had failed before Close, the goodbye carries
// that failure's text, which the peer's error then quotes. FailOp fails one operation on every rank without failing the
// transport. Abort closes every connection, so every peer sees this rank
// lost; Close says goodbye, closes and waits for every goroutine.
package fallback
