package fallback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// conn is one TCP connection to a peer with its writer and reader state.
type conn struct {
	t     *Transport
	peer  int
	index int
	nc    *net.TCPConn
	q     *sendQueue
	fr    frameReader

	rs        readShare // who reads the socket (readshare.go)
	endOnce   sync.Once
	waitRecvF func(ctx context.Context, r *transport.Request) error // c.waitRecv, made once
	waitSendF func(ctx context.Context, r *transport.Request) error // c.waitSend, made once
	watchF    func(r *transport.Request)                            // c.watch, made once

	goodbye    atomic.Bool            // a goodbye frame arrived on this connection
	byeReason  atomic.Pointer[string] // what that goodbye said, set before goodbye
	broken     atomic.Bool            // a write failed; no goodbye on Close
	readerDone chan struct{}          // closed when the reader goroutine returns

	// Writer scratch, reused for every batch so steady-state sending
	// does not allocate.
	hdrs  [maxBatch][wire.HeaderSize]byte
	iov   [][]byte    // backing array of the vector
	wbuf  net.Buffers // the vector being written; WriteTo consumes it
	batch []*sendItem

	// rc reaches the socket for non-blocking writes and socket options;
	// nil means every frame goes through the writer.
	rc syscall.RawConn
	// Scratch of a caller writing directly (see send), used only while it
	// owns the socket, which the send queue grants to one at a time.
	dhdr   [wire.HeaderSize]byte
	diov   [][]byte
	dvec   [][]byte           // the vector writevOnce writes (Linux)
	dn     int                // bytes it wrote
	derr   error              // the error it ended with
	dwrite func(uintptr) bool // writevOnce, made once

	// The reader's low-water mark call and scatter read (Linux).
	lowatN   int
	lowatSet func(uintptr)
	rvec     [2][]byte
	rn       int
	rerr     error
	rread    func(uintptr) bool // readvOnce, made once
}

func newConn(t *Transport, peer, index int, nc *net.TCPConn) *conn {
	c := &conn{t: t, peer: peer, index: index, nc: nc, q: newSendQueue(), readerDone: make(chan struct{})}
	c.rs.init()
	c.waitRecvF, c.waitSendF, c.watchF = c.waitRecv, c.waitSend, c.watch
	if rc, err := nc.SyscallConn(); err == nil {
		c.rc = rc
	}
	c.fr = frameReader{
		peer:       peer,
		size:       t.size,
		r:          newInBuf(nc, readBufferSize),
		m:          t.m,
		maxMessage: t.cfg.MaxMessage,
		gate:       t,
		onData: func(n int) {
			t.bytesRecv.Add(uint64(n))
			t.msgsRecv.Add(1)
		},
	}
	if c.rc != nil && lowatSafe {
		c.fr.lowat = c.setLowat
	}
	if c.rc != nil && scatterReads {
		c.fr.r.two = c.readTwo
	}
	return c
}

// writeLoop writes queued frames until the queue closes or a write fails.
func (c *conn) writeLoop() {
	defer c.t.writers.Done()
	for {
		batch, err := c.q.take(c.batch[:0])
		c.batch = batch
		if len(batch) == 0 {
			return
		}
		if err == nil {
			err = c.writeBatch(batch)
		}
		if err != nil {
			c.broken.Store(true)
			c.writeFailed(batch, err)
			clear(c.batch)
			// writeFailed closed the queue: nobody writes after us.
			c.q.release()
			return
		}
		clear(c.batch) // drop references to the callers' buffers
		c.q.release()
	}
}

// writeBatch writes the frames of batch with one vectored write: each
// header followed by the caller's buffers, none of them copied. The first
// frame may be one a caller began writing itself (its off bytes are on the
// wire already).
func (c *conn) writeBatch(batch []*sendItem) error {
	iov := c.iov[:0]
	for i, it := range batch {
		wire.EncodeHeader(c.hdrs[i][:], &it.hdr)
		iov = appendFrame(iov, c.hdrs[i][:], it)
	}
	c.iov = iov
	c.wbuf = iov
	_, err := c.wbuf.WriteTo(c.nc)
	clear(iov) // drop the references to the callers' buffers
	if err != nil {
		return err
	}
	for _, it := range batch {
		c.sent(it)
	}
	return nil
}

// sent counts a fully written frame and completes its request.
func (c *conn) sent(it *sendItem) {
	if it.req != nil {
		c.t.bytesSent.Add(it.hdr.Length)
		c.t.msgsSent.Add(1)
	}
	it.finish(nil)
}

// send writes it to the socket from the caller's goroutine when the
// connection is idle, as far as the kernel takes it without blocking, and
// leaves the rest (or the whole frame, when others are queued or writing)
// to the writer goroutine. Writing directly saves two goroutine hand-offs
// (caller to writer, writer back to a waiting caller), each a possible
// scheduler wake-up on the latency path of every message. The caller never
// waits for the peer: a frame the socket buffer cannot take at once is
// finished by the writer, so Send stays non-blocking.
//
// Frames above directMax always go through the writer: their hand-offs
// are small next to the transfer, and copying them into the kernel on the
// writer's goroutine lets the caller go on (say, reducing the previous
// segment) meanwhile.
func (c *conn) send(it *sendItem) {
	if it.hdr.Length > directMax {
		if err := c.q.push(it); err != nil {
			it.finish(err)
		}
		return
	}
	direct, err := c.q.claimDirect(it)
	if err != nil {
		it.finish(err)
		return
	}
	if !direct {
		return // queued for the writer
	}
	// We own the socket's write side: the direct-write scratch is ours.
	wire.EncodeHeader(c.dhdr[:], &it.hdr)
	iov := appendFrame(c.diov[:0], c.dhdr[:], it)
	n, werr := c.writeNow(iov)
	clear(iov)
	c.diov = iov[:0]
	it.off += n
	if werr != nil || it.off < it.frameLen() {
		c.q.releaseDirect(it, werr)
		return
	}
	// Release first: a caller woken by the completion may send again at
	// once and should find the socket free.
	c.q.releaseDirect(nil, nil)
	c.sent(it)
}

// directMax is the largest payload Send writes from the caller's goroutine.
const directMax = 1 << 20

// readerGrace is how long a failed write waits for the connection's
// reader to report why, so that a peer that closed cleanly is reported as
// closed rather than as a reset connection.
const readerGrace = 100 * time.Millisecond

// writeFailed fails the batch that could not be written and the transport.
func (c *conn) writeFailed(batch []*sendItem, err error) {
	t := c.t
	if !t.isStopping() {
		c.kick() // someone must read the peer's goodbye or reset
		select {
		case <-c.readerDone:
		case <-time.After(readerGrace):
		}
	}
	var lost error = t.lost(c, "send to", err)
	if sticky := t.Err(); sticky != nil {
		lost = sticky
	}
	for _, it := range batch {
		it.finish(lost)
	}
	if t.saidGoodbye(c.peer) {
		// The peer closed gracefully: sends to it fail, the job goes on.
		c.q.close(lost)
		return
	}
	t.failPeer(lost, c.peer)
}

// readLoop is the connection's background reader: it reads whenever it is
// its turn (see readshare.go) until the connection ends.
func (c *conn) readLoop() {
	defer c.t.readers.Done()
	for {
		seen, ok := c.awaitTurn()
		if !ok {
			return
		}
		if err := c.readInBackground(seen); err != nil {
			c.readEnded(err)
			return
		}
	}
}

// readEnded is called by whoever read the error that ended the
// connection's read side (the background reader or a waiter), and reports
// why, once.
func (c *conn) readEnded(err error) {
	c.endOnce.Do(func() {
		c.reportReadEnd(err)
		c.markReadEnded()
		close(c.readerDone)
	})
}

func (c *conn) reportReadEnd(err error) {
	t := c.t
	if c.fr.sawGoodbye {
		c.byeReason.Store(&c.fr.byeReason)
		c.goodbye.Store(true)
	}
	if t.isStopping() || errors.Is(err, errStopping) {
		return
	}
	if c.fr.sawGoodbye && !errors.Is(err, transport.ErrProtocol) {
		// Whatever ended the stream after a goodbye (EOF, or a reset
		// because we were still sending) is the peer closing.
		t.connClosedByPeer(c.peer)
		return
	}
	if errors.Is(err, transport.ErrProtocol) {
		t.cfg.Log.Warnf(logging.TCP, "protocol error from rank %d on connection %d: %v", c.peer, c.index, err)
		// A rank that cannot trust its input is broken as a whole:
		// closing every connection tells the other ranks at once.
		perr := &transport.PeerError{Peer: c.peer, Kind: transport.ErrProtocol, Err: protocolCause(c, err)}
		if t.losePeer(c.peer, perr) {
			return // the per-peer model: only that peer's connections close
		}
		t.fail(perr, closeAll)
		return
	}
	t.failPeer(t.lost(c, "receive from", err), c.peer)
}

// sayGoodbye writes a goodbye frame, best effort: the connection is about
// to close either way, the goodbye only improves the peer's error message.
// reason, when this rank closes after a failure, tells the peer why, so
// that an operation it fails because of this close names the root cause
// (a third rank's death, say) and not only this rank.
func (c *conn) sayGoodbye(deadline time.Time, reason string) {
	if c.broken.Load() {
		return
	}
	b := make([]byte, wire.HeaderSize, wire.HeaderSize+len(reason))
	wire.EncodeHeader(b, &wire.Header{Kind: wire.Goodbye, Length: uint64(len(reason))})
	b = append(b, reason...)
	_ = c.nc.SetWriteDeadline(deadline)
	_, _ = c.nc.Write(b)
}

// goodbyeReason is the reason the peer's goodbye on c carried ("" if none
// or no goodbye yet).
func (c *conn) goodbyeReason() string {
	if r := c.byeReason.Load(); r != nil {
		return *r
	}
	return ""
}

func protocolCause(c *conn, err error) error {
	return fmt.Errorf("connection %d from rank %d: %w", c.index, c.peer, err)
}
