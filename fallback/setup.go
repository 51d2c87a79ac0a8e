package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// handshakeTimeout bounds one connection's authentication and hello when
// the set-up has no deadline of its own. With one, the handshake may take
// all of it: on a lossy link a lost SYN makes Linux start the connection's
// retransmission timeout at 3 s and double it, so a few lost segments
// outlast any short bound (test/cluster TestFaultPacketLoss), and a rank
// that gave up would fail the whole launch. A silent stranger holds no
// slot (slots are claimed after the hello), only its goroutine, which the
// end of the set-up closes.
const handshakeTimeout = time.Minute

// addrKey is the store key under which rank publishes its listen address.
func addrKey(rank int) string { return "tcp/addr/" + strconv.Itoa(rank) }

// mesh builds the full mesh of one rank: it dials every lower rank and
// accepts every higher one, ConnsPerPeer connections each.
type mesh struct {
	cfg *Config

	congestionSaid sync.Once       // logged the auto congestion switch
	refusals       logging.Limiter // of the "refused connection" warnings

	mu       sync.Mutex
	slots    [][]*net.TCPConn // slots[peer][index]
	missing  int              // accepted slots still empty
	complete chan struct{}    // closed when missing reaches zero
}

// connectMesh returns the established connections, indexed by peer and
// connection index. On error every connection is closed.
func connectMesh(ctx context.Context, cfg *Config) ([][]*net.TCPConn, error) {
	m := &mesh{cfg: cfg, slots: make([][]*net.TCPConn, cfg.Size), complete: make(chan struct{})}
	for p := range m.slots {
		if p != cfg.Rank {
			m.slots[p] = make([]*net.TCPConn, cfg.ConnsPerPeer)
		}
	}
	m.missing = (cfg.Size - 1 - cfg.Rank) * cfg.ConnsPerPeer
	if m.missing == 0 {
		close(m.complete)
	}

	lc := net.ListenConfig{Control: socketControl(cfg)}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(cfg.ListenIP.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen on %v: %w", cfg.Rank, cfg.ListenIP, err)
	}
	defer ln.Close() // the mesh is complete (or failed): no more connections
	addr := ln.Addr().String()
	if err := cfg.Store.Set(ctx, addrKey(cfg.Rank), []byte(addr)); err != nil {
		return nil, fmt.Errorf("tcp: rank %d: publish listen address %s: %w", cfg.Rank, addr, err)
	}

	setupCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopListener := context.AfterFunc(setupCtx, func() { ln.Close() })
	defer stopListener()

	var handshakes sync.WaitGroup
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		m.acceptLoop(setupCtx, ln.(*net.TCPListener), &handshakes)
	}()

	dialErrs := make(chan error, cfg.Rank)
	for p := 0; p < cfg.Rank; p++ {
		go func() { dialErrs <- m.dialPeer(setupCtx, p) }()
	}
	var firstErr error
	for p := 0; p < cfg.Rank; p++ {
		if err := <-dialErrs; err != nil && firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	if firstErr == nil {
		select {
		case <-m.complete:
		case <-setupCtx.Done():
			firstErr = fmt.Errorf("tcp: rank %d: waiting for connections from %s: %w", cfg.Rank, transport.RankList(m.missingRanks()), setupCtx.Err())
		}
	}
	cancel()
	ln.Close()
	<-acceptDone
	handshakes.Wait()
	if firstErr != nil {
		m.closeAll()
		return nil, firstErr
	}
	return m.slots, nil
}

// acceptLoop accepts connections until the listener closes, and runs each
// one's handshake on its own goroutine so a slow or hostile client cannot
// hold up the others.
func (m *mesh) acceptLoop(ctx context.Context, ln *net.TCPListener, handshakes *sync.WaitGroup) {
	for {
		nc, err := ln.AcceptTCP()
		if err != nil {
			if ctx.Err() == nil {
				m.cfg.Log.Warnf(logging.TCP, "accept: %v", err)
			}
			return
		}
		handshakes.Add(1)
		go func() {
			defer handshakes.Done()
			if err := m.acceptOne(ctx, nc); err != nil {
				// The refusal is logged before the connection closes, so
				// a client that sees its refusal finds it in the log.
				defer nc.Close()
				// Once the set-up is over (complete or failed) its
				// context closes the handshakes still running: that is
				// no refusal worth a warning.
				// Strangers (who fail authentication) are rate-limited;
				// a rank of the job that disagrees about it is said
				// every time: there are at most a few of those.
				var stranger strangerError
				switch {
				case ctx.Err() != nil:
				case errors.As(err, &stranger):
					m.cfg.Log.WarnLimited(&m.refusals, logging.TCP, "refused connection from %v: %v", nc.RemoteAddr(), err)
				default:
					m.cfg.Log.Warnf(logging.TCP, "refused connection from %v: %v", nc.RemoteAddr(), err)
				}
			}
		}()
	}
}

// strangerError is the refusal of a connection that did not authenticate.
type strangerError struct{ error }

func (e strangerError) Unwrap() error { return e.error }

// acceptOne authenticates an incoming connection, checks its hello and, if
// it is the connection a higher rank owes us, files it in its slot.
func (m *mesh) acceptOne(ctx context.Context, nc *net.TCPConn) error {
	cfg := m.cfg
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if err := m.tuneConn(nc); err != nil {
		return err
	}
	deadline := handshakeDeadline(ctx)
	if err := bootstrap.Authenticate(nc, cfg.Token, false, deadline); err != nil {
		return strangerError{err}
	}
	theirs, err := readHello(nc, deadline)
	if err != nil {
		return err
	}
	peer, index := int(theirs.rank), int(theirs.conn)
	switch {
	case int(theirs.size) != cfg.Size:
		return fmt.Errorf("rank %d says the job has %d ranks, this rank %d", peer, theirs.size, cfg.Size)
	case int(theirs.connsPerPeer) != cfg.ConnsPerPeer:
		return fmt.Errorf("rank %d uses %d connections per peer, this rank %d", peer, theirs.connsPerPeer, cfg.ConnsPerPeer)
	case peer <= cfg.Rank || peer >= cfg.Size:
		return fmt.Errorf("hello from rank %d, but only ranks %d..%d connect to rank %d", peer, cfg.Rank+1, cfg.Size-1, cfg.Rank)
	case index >= cfg.ConnsPerPeer:
		return fmt.Errorf("rank %d: connection index %d out of range", peer, index)
	}
	if !m.reserve(peer, index) {
		return fmt.Errorf("rank %d: duplicate connection %d", peer, index)
	}
	if err := writeHello(nc, m.myHello(index), deadline); err != nil {
		m.unreserve(peer, index)
		return fmt.Errorf("rank %d: send hello: %w", peer, err)
	}
	if !stop() {
		m.unreserve(peer, index)
		return ctx.Err()
	}
	_ = nc.SetDeadline(time.Time{})
	m.fill(peer, index, nc)
	return nil
}

// dialPeer opens the connections to a lower rank.
func (m *mesh) dialPeer(ctx context.Context, peer int) error {
	cfg := m.cfg
	addr, err := cfg.Store.Get(ctx, addrKey(peer))
	if err != nil {
		return fmt.Errorf("tcp: rank %d: look up the address of rank %d: %w", cfg.Rank, peer, err)
	}
	for index := 0; index < cfg.ConnsPerPeer; index++ {
		nc, err := m.dialOne(ctx, peer, index, string(addr))
		if err != nil {
			return fmt.Errorf("tcp: rank %d: connect to rank %d at %s (connection %d): %w", cfg.Rank, peer, addr, index, transport.LostInSetup(peer, err))
		}
		m.mu.Lock()
		m.slots[peer][index] = nc
		m.mu.Unlock()
	}
	return nil
}

func (m *mesh) dialOne(ctx context.Context, peer, index int, addr string) (*net.TCPConn, error) {
	cfg := m.cfg
	d := net.Dialer{Control: socketControl(cfg), KeepAlive: -1} // keepalive is set by tuneConn
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	nc := c.(*net.TCPConn)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	ok := false
	defer func() {
		if !ok {
			stop()
			nc.Close()
		}
	}()
	if err := m.tuneConn(nc); err != nil {
		return nil, err
	}
	deadline := handshakeDeadline(ctx)
	if err := bootstrap.Authenticate(nc, cfg.Token, true, deadline); err != nil {
		return nil, err
	}
	if err := writeHello(nc, m.myHello(index), deadline); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	theirs, err := readHello(nc, deadline)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("rank %d refused the connection after authentication (different job size or connections per peer? see its log): %w", peer, err)
		}
		return nil, err
	}
	if int(theirs.rank) != peer || int(theirs.size) != cfg.Size || int(theirs.conn) != index || int(theirs.connsPerPeer) != cfg.ConnsPerPeer {
		return nil, fmt.Errorf("%w: expected hello from rank %d (size %d, connection %d of %d), got rank %d (size %d, connection %d of %d)",
			transport.ErrProtocol, peer, cfg.Size, index, cfg.ConnsPerPeer, theirs.rank, theirs.size, theirs.conn, theirs.connsPerPeer)
	}
	if !stop() {
		return nil, ctx.Err() // ctx ended and closed the connection
	}
	_ = nc.SetDeadline(time.Time{})
	ok = true
	return nc, nil
}

func (m *mesh) myHello(index int) hello {
	return hello{rank: uint32(m.cfg.Rank), size: uint32(m.cfg.Size), conn: uint32(index), connsPerPeer: uint32(m.cfg.ConnsPerPeer)}
}

// reserve claims an accepted slot for a connection being set up, so a
// second connection claiming the same slot is refused.
func (m *mesh) reserve(peer, index int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots[peer][index] != nil {
		return false
	}
	m.slots[peer][index] = reservedConn
	return true
}

func (m *mesh) unreserve(peer, index int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slots[peer][index] = nil
}

func (m *mesh) fill(peer, index int, nc *net.TCPConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slots[peer][index] = nc
	m.missing--
	if m.missing == 0 {
		close(m.complete)
	}
}

// reservedConn marks a slot whose connection is mid-handshake.
var reservedConn = new(net.TCPConn)

// missingRanks lists the higher ranks that have not connected completely.
func (m *mesh) missingRanks() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ranks []int
	for p := m.cfg.Rank + 1; p < m.cfg.Size; p++ {
		for _, nc := range m.slots[p] {
			if nc == nil || nc == reservedConn {
				ranks = append(ranks, p)
				break
			}
		}
	}
	return ranks
}

func (m *mesh) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range m.slots {
		for i, nc := range list {
			if nc != nil && nc != reservedConn {
				nc.Close()
			}
			list[i] = nil
		}
	}
}

// handshakeDeadline is ctx's deadline, or handshakeTimeout from now if it
// has none.
func handshakeDeadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(handshakeTimeout)
}

func writeHello(nc net.Conn, h hello, deadline time.Time) error {
	var b [helloSize]byte
	encodeHello(b[:], h)
	_ = nc.SetWriteDeadline(deadline)
	_, err := nc.Write(b[:])
	return err
}

func readHello(nc net.Conn, deadline time.Time) (hello, error) {
	var b [helloSize]byte
	_ = nc.SetReadDeadline(deadline)
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	return decodeHello(b[:])
}

// tuneConn sets the options of an established connection: no Nagle delay
// (small control messages must not wait), socket buffers, keepalive
// probes that declare a silent peer lost within about PeerTimeout, and
// the congestion control (Config.Congestion).
func (m *mesh) tuneConn(nc *net.TCPConn) error {
	cfg := m.cfg
	if err := nc.SetNoDelay(true); err != nil {
		return fmt.Errorf("set TCP_NODELAY: %w", err)
	}
	if cfg.SocketBuffer > 0 {
		if err := nc.SetReadBuffer(cfg.SocketBuffer); err != nil {
			return fmt.Errorf("set SO_RCVBUF: %w", err)
		}
		if err := nc.SetWriteBuffer(cfg.SocketBuffer); err != nil {
			return fmt.Errorf("set SO_SNDBUF: %w", err)
		}
	}
	ka := net.KeepAliveConfig{Enable: true, Idle: cfg.PeerTimeout / 2, Interval: cfg.PeerTimeout / 6, Count: 3}
	if err := nc.SetKeepAliveConfig(ka); err != nil {
		return fmt.Errorf("set keepalive: %w", err)
	}
	from, to, err := setCongestion(nc, cfg.Congestion)
	if err != nil {
		return fmt.Errorf("congestion control (SPARCML_TCP_CONGESTION=%s): %w", cfg.Congestion, err)
	}
	if to != "" && cfg.Congestion == CongestionAuto {
		// Every rank applies the same rule, so rank 0 says it for the
		// job; the others say it only at TRACE.
		m.congestionSaid.Do(func() {
			level := logging.Info
			if cfg.Rank != 0 {
				level = logging.Trace
			}
			cfg.Log.Logf(level, logging.TCP, "connections within this host use %s, not %s, which paces sends (SPARCML_TCP_CONGESTION=system keeps it)",
				to, from)
		})
	}
	return nil
}
