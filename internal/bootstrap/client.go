package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
)

const (
	// defaultCloseWait bounds how long rank 0's Close waits for the other
	// ranks to finish with the store.
	defaultCloseWait = 30 * time.Second
	// byeTimeout bounds the goodbye exchange of Close.
	byeTimeout = 5 * time.Second
	// requestWriteTimeout bounds writing one request when the context has
	// no earlier deadline; the server reads promptly, so hitting it means
	// the server is stuck.
	requestWriteTimeout = time.Minute
	// Dial retry backoff.
	firstBackoff = 25 * time.Millisecond
	maxBackoff   = time.Second
	// dialAttemptTimeout bounds one connection attempt (connect and
	// handshake), so an address that drops packets is retried rather than
	// waited on for the kernel's minutes-long SYN timeout.
	dialAttemptTimeout = handshakeTimeout
	// retryLogEvery spaces the "still waiting" log lines.
	retryLogEvery = 10 * time.Second
)

// Connect joins the job's key-value store. On rank 0 it first starts the
// store server on env.Addr's port. Every rank then dials env.Addr, retrying
// with backoff until ctx ends, since rank 0 may start after the others.
// log receives the store's diagnostics (refused connections, ranks that
// vanished); it may be nil.
func Connect(ctx context.Context, env Env, log *logging.Logger) (Store, error) {
	if err := env.Validate(); err != nil {
		return nil, err
	}
	var srv *server
	if env.Rank == 0 {
		ln, err := listenStore(ctx, env, log)
		if err != nil {
			return nil, err
		}
		srv = startServer(ln, env.Size, env.Token, log)
	}
	c, err := dialStore(ctx, env, rand.Uint64(), log)
	if err != nil {
		if srv != nil {
			srv.stop()
		}
		return nil, err
	}
	c.srv = srv
	return c, nil
}

// listenStore listens on env.Addr's port: on the address itself when it is
// one of this host's non-loopback addresses (or a loopback literal), else
// on all addresses. A host name that resolves to loopback here may resolve
// to a real address on the other nodes (Debian maps the host name to
// 127.0.1.1), so that case listens everywhere.
func listenStore(ctx context.Context, env Env, log *logging.Logger) (net.Listener, error) {
	host, port, _ := net.SplitHostPort(env.Addr) // checked by Validate
	ip, local := localBindIP(ctx, host)
	if !local {
		log.Warnf(logging.Bootstrap, "%s (%s) is not an address of this host; listening on all addresses, but the other ranks will dial %s",
			host, orDefault(env.AddrSource, "SPARCML_ADDR"), env.Addr)
	}
	bind := net.JoinHostPort(ip, port)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank 0: cannot listen for the rendezvous store on %s (%s from %s): %w",
			bind, env.Addr, orDefault(env.AddrSource, "SPARCML_ADDR"), err)
	}
	log.Infof(logging.Bootstrap, "rendezvous store listening on %v", ln.Addr())
	return ln, nil
}

// localBindIP returns the address to bind for host: the host itself if it
// is a local address as described at listenStore, else "" (all
// addresses). local is false when host is certainly not this host.
func localBindIP(ctx context.Context, host string) (ip string, local bool) {
	if addr := net.ParseIP(host); addr != nil {
		if addr.IsLoopback() || isLocalIP(addr) {
			return addr.String(), true
		}
		return "", false
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(rctx, host)
	if err != nil {
		return "", true // cannot tell; listening everywhere is safe
	}
	onlyLoopback := true
	for _, a := range addrs {
		if a.IP.IsLoopback() {
			continue
		}
		onlyLoopback = false
		if isLocalIP(a.IP) {
			return a.IP.String(), true
		}
	}
	return "", onlyLoopback
}

func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// unreachableError reports that the store could not be reached before the
// context ended. It unwraps to the last connection error and to the
// context's error.
type unreachableError struct {
	rank    int
	addr    string
	source  string
	last    error
	ctxErr  error
	elapsed time.Duration
}

func (e *unreachableError) Error() string {
	src := ""
	if e.source != "" {
		src = " (" + e.source + ")"
	}
	// Rank 0 serves the store: name it, since a store that stopped
	// answering is rank 0 gone, and the error must lead to it.
	return fmt.Sprintf("bootstrap: rank %d: cannot reach rank 0's rendezvous store at %s%s: %v (tried for %v)",
		e.rank, e.addr, src, shortNetError(e.last), roundElapsed(e.elapsed))
}

func (e *unreachableError) Unwrap() []error { return []error{e.last, e.ctxErr} }

// shortNetError drops the "dial tcp host:port:" prefix that the message
// around it already says.
func shortNetError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && op.Err != nil {
		return op.Err
	}
	return err
}

func roundElapsed(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// permanentError marks a handshake failure that retrying cannot fix: the
// token is wrong, or the server refused this rank.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// dialStore connects to the store at env.Addr, retrying until ctx ends. It
// gives up a little before ctx's deadline so the caller gets the reason
// rather than a bare "deadline exceeded".
func dialStore(ctx context.Context, env Env, process uint64, log *logging.Logger) (*client, error) {
	start := time.Now()
	giveUp, hasDeadline := ctx.Deadline()
	if hasDeadline {
		giveUp = giveUp.Add(-min(50*time.Millisecond, time.Until(giveUp)/20))
	}
	source := orDefault(env.AddrSource, "SPARCML_ADDR")
	unreachable := func(last error) error {
		ctxErr := ctx.Err()
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded // we stopped early because of the deadline
		}
		if last == nil {
			last = ctxErr
		}
		return &unreachableError{rank: env.Rank, addr: env.Addr, source: source, last: last, ctxErr: ctxErr, elapsed: time.Since(start)}
	}
	backoff := firstBackoff
	lastLog := start
	var last error
	for attempt := 1; ; attempt++ {
		attemptEnd := time.Now().Add(dialAttemptTimeout)
		if hasDeadline && giveUp.Before(attemptEnd) {
			attemptEnd = giveUp
		}
		actx, cancel := context.WithDeadline(ctx, attemptEnd)
		conn, br, err := dialOnce(actx, env, process)
		cancel()
		if err == nil {
			c := newClient(conn, br, env, process, log)
			if attempt > 1 {
				log.Infof(logging.Bootstrap, "reached the rendezvous store at %s after %v", env.Addr, roundElapsed(time.Since(start)))
			}
			return c, nil
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return nil, fmt.Errorf("bootstrap: rank %d: rendezvous store at %s (%s): %w", env.Rank, env.Addr, source, perm.err)
		}
		// A failure caused by our own deadline says nothing new about the
		// address; keep the previous reason.
		if last == nil || (!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)) {
			last = err
		}
		if time.Since(lastLog) >= retryLogEvery {
			log.Warnf(logging.Bootstrap, "still waiting for the rendezvous store at %s (%s): %v", env.Addr, source, shortNetError(last))
			lastLog = time.Now()
		}
		// Jitter spreads the retries of many ranks over time.
		sleep := backoff/2 + rand.N(backoff/2+1)
		if hasDeadline {
			sleep = min(sleep, time.Until(giveUp))
		}
		if ctx.Err() != nil || sleep <= 0 {
			return nil, unreachable(last)
		}
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return nil, unreachable(last)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// dialOnce makes one connection attempt: TCP connect, authentication and
// hello. Failures that retrying cannot fix are *permanentError.
func dialOnce(ctx context.Context, env Env, process uint64) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", env.Addr)
	if err != nil {
		return nil, nil, err
	}
	// Closing the connection is the one way to interrupt every step below
	// when ctx is cancelled.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	br, err := clientHandshake(ctx, conn, env, process)
	interrupted := !stop()
	if err == nil && !interrupted {
		return conn, br, nil
	}
	conn.Close()
	if interrupted || ctx.Err() != nil {
		return nil, nil, fmt.Errorf("handshake interrupted: %w", context.Cause(ctx))
	}
	return nil, nil, err
}

// clientHandshake authenticates and says hello; it returns the reader to
// keep using, which may hold bytes read past the reply.
func clientHandshake(ctx context.Context, conn net.Conn, env Env, process uint64) (*bufio.Reader, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(encodeClaim(env.Rank)); err != nil {
		return nil, fmt.Errorf("sending claim: %w", err)
	}
	if err := Authenticate(conn, env.Token, true, deadline); err != nil {
		if errors.Is(err, ErrAuth) {
			return nil, &permanentError{fmt.Errorf("%w (token from %s)", err, orDefault(env.TokenSource, "SPARCML_TOKEN"))}
		}
		return nil, err
	}
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	bw := bufio.NewWriter(conn)
	h := hello{version: protocolVersion, rank: uint32(env.Rank), size: uint32(env.Size), process: process}
	if err := writeFrame(bw, frame{op: opHello, id: 1, value: encodeHello(h)}); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	br := bufio.NewReader(conn)
	reply, err := readFrame(br)
	if err != nil {
		return nil, fmt.Errorf("reading hello reply: %w", noEOF(err))
	}
	switch reply.op {
	case opOK:
		return br, nil
	case opErr:
		return nil, &permanentError{fmt.Errorf("the store refused this rank: %s", reply.value)}
	case opFault:
		le, err := decodeFault(reply.value)
		if err != nil {
			return nil, err
		}
		return nil, &permanentError{le}
	}
	return nil, fmt.Errorf("%w: hello answered with %s", errMalformed, opName(reply.op))
}

// client is one rank's connection to the store. Requests carry ids so
// that concurrent calls share the connection; a reader goroutine hands
// each reply to the call waiting for it. A connection that ends is
// redialled (reconnect), and the requests still unanswered are sent
// again.
type client struct {
	rank      int
	env       Env
	process   uint64 // random; the hello says it, so the store knows a reconnect
	log       *logging.Logger
	srv       *server // rank 0 only: stopped by Close
	closeWait time.Duration

	wmu sync.Mutex // serialises request writes
	bw  *bufio.Writer
	gen uint64 // connections made; guarded by wmu

	mu      sync.Mutex
	conn    net.Conn
	nextID  uint32
	pending map[uint32]*pendingCall
	err     error // once set, the client is unusable

	readerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// pendingCall is a request waiting for its reply; gen is the connection
// it was last sent on.
type pendingCall struct {
	f   frame
	ch  chan frame
	gen uint64
}

func newClient(conn net.Conn, br *bufio.Reader, env Env, process uint64, log *logging.Logger) *client {
	c := &client{
		rank:       env.Rank,
		env:        env,
		process:    process,
		conn:       conn,
		log:        log,
		closeWait:  defaultCloseWait,
		bw:         bufio.NewWriter(conn),
		gen:        1,
		nextID:     1, // 1 was the hello
		pending:    make(map[uint32]*pendingCall),
		readerDone: make(chan struct{}),
	}
	go c.readReplies(br)
	return c
}

// readReplies delivers replies until the connection ends for good.
func (c *client) readReplies(br *bufio.Reader) {
	defer close(c.readerDone)
	for {
		f, err := readFrame(br)
		if err != nil {
			if br = c.reconnect(err); br != nil {
				continue
			}
			c.fail(fmt.Errorf("%w: %w", errStoreLost, noEOF(err)))
			return
		}
		switch f.op {
		case opOK, opValue, opErr:
		case opFault:
			le, err := decodeFault(f.value)
			if err != nil {
				c.fail(err)
			} else {
				c.fail(le)
			}
			return
		default:
			c.fail(fmt.Errorf("%w: store sent a %s frame", errMalformed, opName(f.op)))
			return
		}
		if f.id == 0 && f.op == opErr {
			c.fail(fmt.Errorf("rank 0's rendezvous store closed the connection: %s", f.value))
			return
		}
		c.mu.Lock()
		p := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		if p != nil {
			p.ch <- f // buffered; a reply for a cancelled call is dropped above
		}
	}
}

// fail makes the client unusable with err as the reason.
func (c *client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	conn := c.conn
	c.mu.Unlock()
	conn.Close()
}

func (c *client) stickyErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// call sends request f and waits for its reply. If ctx ends first, a
// waiting Get is cancelled on the server.
func (c *client) call(ctx context.Context, f frame) (frame, error) {
	if err := ctx.Err(); err != nil {
		return frame{}, err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return frame{}, c.err
	}
	c.nextID++
	if c.nextID == 0 { // 0 is reserved for connection-level errors
		c.nextID = 1
	}
	f.id = c.nextID
	ch := make(chan frame, 1)
	c.pending[f.id] = &pendingCall{f: f, ch: ch}
	c.mu.Unlock()

	if err := c.send(ctx, f); err != nil {
		c.forget(f.id)
		return frame{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-c.readerDone:
		select {
		case r := <-ch: // the reply arrived just before the end
			return r, nil
		default:
		}
		return frame{}, c.stickyErr()
	case <-ctx.Done():
		if c.forget(f.id) && f.op == opGet {
			c.send(context.Background(), frame{op: opCancel, id: f.id})
		}
		return frame{}, ctx.Err()
	}
}

// forget drops a pending call; false if its reply was already taken.
func (c *client) forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// send writes one request, unless reconnect already sent it on this
// connection. A failed write may leave half a frame on the stream, so it
// ends the connection; the reader then reconnects and sends the pending
// requests again, or fails the client.
func (c *client) send(ctx context.Context, f frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	conn, err := c.conn, c.err
	p := c.pending[f.id]
	if f.op == opCancel || f.op == opProgress {
		p = nil // not waiting for a reply: f.id is not its own
	}
	if p != nil {
		if p.gen == c.gen {
			c.mu.Unlock()
			return nil
		}
		p.gen = c.gen
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(requestWriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetWriteDeadline(deadline)
	if err := c.write(f); err != nil {
		conn.Close()
		if p == nil {
			return fmt.Errorf("sending %s to the rendezvous store: %w", opName(f.op), err)
		}
	}
	return nil
}

func (c *client) write(f frame) error {
	if err := writeFrame(c.bw, f); err != nil {
		return err
	}
	return c.bw.Flush()
}

func checkKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("key of %d bytes exceeds the %d-byte limit", len(key), MaxKeyLen)
	}
	return nil
}

// Set implements Store. Keys are write-once: setting a key again with the
// same value succeeds, with a different value fails.
func (c *client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return c.errorf("set", key, err)
	}
	if len(value) > MaxValueLen {
		return c.errorf("set", key, fmt.Errorf("value of %d bytes exceeds the %d-byte limit", len(value), MaxValueLen))
	}
	r, err := c.call(ctx, frame{op: opSet, key: key, value: value})
	if err != nil {
		return c.errorf("set", key, err)
	}
	if r.op != opOK {
		return c.errorf("set", key, replyError(r))
	}
	return nil
}

// Get implements Store: it waits, on the server, until some rank sets key.
func (c *client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, c.errorf("get", key, err)
	}
	r, err := c.call(ctx, frame{op: opGet, key: key})
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (no rank has set the key yet)", err)
		}
		return nil, c.errorf("get", key, err)
	}
	if r.op != opValue {
		return nil, c.errorf("get", key, replyError(r))
	}
	if r.value == nil {
		return []byte{}, nil
	}
	return r.value, nil
}

func replyError(r frame) error {
	if r.op == opErr {
		return fmt.Errorf("store: %s", r.value)
	}
	return fmt.Errorf("%w: store answered with %s", errMalformed, opName(r.op))
}

func (c *client) errorf(op, key string, err error) error {
	return fmt.Errorf("bootstrap: rank %d: %s %s: %w", c.rank, op, strconv.Quote(key), err)
}

// errStoreLost: the connection to the store broke (EOF, reset, ...).
var errStoreLost = errors.New("connection to rank 0's rendezvous store lost")

// Close implements Store. It says goodbye to the store and closes the
// connection. On rank 0 it then waits, up to 30 seconds, until every other
// rank has said goodbye or disconnected, so that late ranks can still read
// the addresses they need, and stops the server.
func (c *client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *client) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), byeTimeout)
	defer cancel()
	_, byeErr := c.call(ctx, frame{op: opBye})
	c.fail(ErrStoreClosed)
	<-c.readerDone
	if c.srv != nil {
		if err := c.srv.waitOthers(c.closeWait); err != nil {
			c.log.Warnf(logging.Bootstrap, "stopping the rendezvous store: %v", err)
		}
		c.srv.stop()
	}
	// Rank 0's server stops as soon as it has read every goodbye, which
	// can be before its answer to ours is written: a connection lost
	// while saying goodbye is the store closing, not a failure.
	if byeErr != nil && !errors.Is(byeErr, ErrStoreClosed) && !errors.Is(byeErr, errStoreLost) {
		return fmt.Errorf("bootstrap: rank %d: saying goodbye to the rendezvous store: %w", c.rank, byeErr)
	}
	return nil
}
