package bootstrap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

const (
	// handshakeTimeout bounds authentication plus hello on one connection,
	// so a silent stranger cannot hold a server goroutine.
	handshakeTimeout = 10 * time.Second
	// maxHandshakes bounds the connections authenticating at once; further
	// ones wait in the listen backlog.
	maxHandshakes = 128
	// maxGetsPerConn bounds the Gets one connection may have waiting.
	maxGetsPerConn = 1 << 16
	// replyWriteTimeout closes a connection whose client stopped reading.
	replyWriteTimeout = time.Minute
)

// rankState follows one rank through the job, for rank 0's Close.
type rankState uint8

const (
	rankUnseen    rankState = iota // never said hello
	rankConnected                  // connected now
	rankFinished                   // said goodbye
	rankLost                       // disconnected without a goodbye
)

// server is rank 0's key-value store. Every connection authenticates with
// the job token and says hello with its rank; then it sends Set, Get,
// Cancel and Bye requests. A Get for a key nobody has set yet waits on the
// server, and is answered when the key is set.
type server struct {
	ln         net.Listener
	size       int
	token      []byte
	log        *logging.Logger
	refusals   logging.Limiter // of the "refused connection" warnings
	handshakes chan struct{}   // semaphore of maxHandshakes
	quit       chan struct{}   // closed by stop
	wg         sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	values   map[string][]byte
	waiting  map[string][]waiter // key -> Gets waiting for it
	open     map[net.Conn]struct{}
	ranks    []*serverConn // the connection of each rank, nil if none
	state    []rankState
	ready    []bool                // the rank's transport is up (opReady)
	nReady   int                   // ranks ready
	awaiting []waiter              // opReady requests waiting for the others
	losses   []uint64              // how often the rank's connection ended without a goodbye
	changed  chan struct{}         // closed and replaced whenever state changes
	fault    string                // why the launch failed; "" while it has not
	progress map[int]progressEntry // each rank's latest progress record

	faultCode transport.Code // the code of fault
}

// waiter is one Get waiting for its key.
type waiter struct {
	c  *serverConn
	id uint32
}

// serverConn is one authenticated client connection.
type serverConn struct {
	conn    net.Conn
	br      *bufio.Reader
	rank    int
	process uint64 // the hello's process id
	out     *outQueue
	gets    map[uint32]string // waiting Get id -> key; guarded by server.mu
	saidBye bool              // only touched by the connection's reader
}

// startServer serves the store on ln for a job of size ranks until stop.
func startServer(ln net.Listener, size int, token []byte, log *logging.Logger) *server {
	s := newServer(size, token, log)
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// newServer returns a server's state without a listener.
func newServer(size int, token []byte, log *logging.Logger) *server {
	return &server{
		size:       size,
		token:      token,
		log:        log,
		handshakes: make(chan struct{}, maxHandshakes),
		quit:       make(chan struct{}),
		values:     make(map[string][]byte),
		waiting:    make(map[string][]waiter),
		open:       make(map[net.Conn]struct{}),
		ranks:      make([]*serverConn, size),
		state:      make([]rankState, size),
		ready:      make([]bool, size),
		losses:     make([]uint64, size),
		changed:    make(chan struct{}),
		progress:   make(map[int]progressEntry),
	}
}

func (s *server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little rather
			// than spin, and keep serving the connections we have.
			s.log.Warnf(logging.Bootstrap, "store: accept: %v", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-s.quit:
				return
			}
			continue
		}
		select {
		case s.handshakes <- struct{}{}:
		case <-s.quit:
			conn.Close()
			return
		}
		s.wg.Add(1)
		go s.handle(conn)
	}
}

// handle runs one connection from handshake to close.
func (s *server) handle(conn net.Conn) {
	defer s.wg.Done()
	defer conn.Close()
	if !s.track(conn) {
		<-s.handshakes
		return
	}
	defer s.untrack(conn)
	c, err := s.handshake(conn)
	<-s.handshakes
	if err != nil {
		// A handshake cut short by stop is the store closing, not a
		// refusal. Strangers (who fail authentication) are
		// rate-limited, so a flood of them costs a line per interval;
		// a rank of the job refused (a duplicate, a wrong size) is said
		// every time.
		var stranger strangerError
		switch {
		case s.isStopping():
		case errors.As(err, &stranger):
			s.log.WarnLimited(&s.refusals, logging.Bootstrap, "store: refused connection from %v: %v", conn.RemoteAddr(), err)
		default:
			s.log.Warnf(logging.Bootstrap, "store: refused connection from %v: %v", conn.RemoteAddr(), err)
		}
		return
	}
	s.serveConn(c)
}

// track records conn so that stop can close it; false once stopping.
func (s *server) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.open[conn] = struct{}{}
	return true
}

func (s *server) untrack(conn net.Conn) {
	s.mu.Lock()
	delete(s.open, conn)
	s.mu.Unlock()
}

// strangerError is the refusal of a connection that did not authenticate.
type strangerError struct{ error }

func (e strangerError) Unwrap() error { return e.error }

// handshake authenticates conn, reads its hello and registers its rank.
// A refused hello gets an error reply saying why before the close.
func (s *server) handshake(conn net.Conn) (*serverConn, error) {
	deadline := time.Now().Add(handshakeTimeout)
	claimed, err := readClaim(conn, deadline)
	if err != nil {
		return nil, strangerError{err}
	}
	if err := Authenticate(conn, s.token, false, deadline); err != nil {
		switch {
		case errors.Is(err, ErrAuth):
			go s.wrongToken(claimed)
		case isCutShort(err):
			s.cutShort(claimed)
		}
		return nil, strangerError{fmt.Errorf("claiming rank %d: %w", claimed, err)}
	}
	conn.SetReadDeadline(deadline)
	br := bufio.NewReader(conn)
	f, err := readFrame(br)
	if err != nil {
		if isCutShort(err) {
			s.cutShort(claimed)
		}
		return nil, fmt.Errorf("reading hello: %w", noEOF(err))
	}
	if f.op != opHello {
		return nil, fmt.Errorf("%w: first frame is %s, want hello", errMalformed, opName(f.op))
	}
	h, err := decodeHello(f.value)
	if err != nil {
		return nil, err
	}
	c := &serverConn{conn: conn, br: br, rank: int(h.rank), process: h.process, out: newOutQueue(), gets: make(map[uint32]string)}
	refusal, fatal := s.register(c, h)
	if fatal {
		refusal = s.failLaunch(transport.CodeInvalid, refusal, nil)
	}
	reply := frame{op: opOK, id: f.id}
	switch {
	case refusal != "" && refusal == s.faultCause():
		reply = s.faultFrame(f.id)
	case refusal != "":
		reply = frame{op: opErr, id: f.id, value: []byte(refusal)}
	}
	conn.SetWriteDeadline(deadline)
	bw := bufio.NewWriter(conn)
	if err := writeFrame(bw, reply); err == nil {
		err = bw.Flush()
	}
	conn.SetDeadline(time.Time{})
	if refusal != "" {
		return nil, errors.New(refusal)
	}
	if err != nil {
		s.unregister(c)
		return nil, fmt.Errorf("rank %d: sending hello reply: %w", c.rank, err)
	}
	return c, nil
}

// register admits c as its rank's connection, or says why not. A
// refusal is fatal to the launch (failLaunch) when the process holds the
// job's token and some rank has not connected yet: the launch itself is
// inconsistent, and the ranks that are up would otherwise wait for
// SPARCML_INIT_TIMEOUT.
func (s *server) register(c *serverConn, h hello) (refusal string, fatal bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	incomplete := s.launchIncompleteLocked()
	switch {
	case s.fault != "":
		return s.fault, false
	case h.version != protocolVersion:
		return fmt.Sprintf("store protocol version %d, rank 0 speaks %d (mixed sparcml versions?)", h.version, protocolVersion), incomplete
	case int64(h.size) != int64(s.size):
		return fmt.Sprintf("rank %d says the job has %d ranks, rank 0 has %d (inconsistent launch?)", h.rank, h.size, s.size), incomplete
	case int64(h.rank) >= int64(s.size):
		return fmt.Sprintf("rank %d is outside [0,%d)", h.rank, s.size), incomplete
	case s.stopping:
		return "the store is shutting down", false
	case s.ranks[h.rank] != nil && s.ranks[h.rank].process == h.process:
		// The same process reconnecting before its old connection
		// ended here (client.reconnect): the new one replaces it.
		s.ranks[h.rank].conn.Close()
	case s.ranks[h.rank] != nil:
		return fmt.Sprintf("rank %d is already connected from %v, and connected again from %v (two processes with the same rank?)",
			h.rank, s.ranks[h.rank].conn.RemoteAddr(), c.conn.RemoteAddr()), incomplete
	}
	s.ranks[h.rank] = c
	s.setStateLocked(int(h.rank), rankConnected)
	return "", false
}

func (s *server) setStateLocked(rank int, st rankState) {
	s.state[rank] = st
	close(s.changed)
	s.changed = make(chan struct{})
}

// serveConn answers c's requests until it disconnects or misbehaves.
func (s *server) serveConn(c *serverConn) {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		if err := c.out.run(c.conn); err != nil {
			if !s.isStopping() {
				s.log.Warnf(logging.Bootstrap, "store: sending replies to rank %d: %v; closing its connection", c.rank, err)
			}
			c.conn.Close() // unblocks the reader below
		}
	}()
	err := s.readRequests(c)
	if errors.Is(err, errMalformed) {
		s.log.Warnf(logging.Bootstrap, "store: closing connection of rank %d (%v): %v", c.rank, c.conn.RemoteAddr(), err)
		// Tell the client why before closing, so its error says so.
		c.out.push(frame{op: opErr, value: []byte(err.Error())})
	} else if !c.saidBye && !s.isStopping() {
		reason := err.Error()
		if isDisconnect(err) {
			reason = "connection closed"
		}
		s.log.Warnf(logging.Bootstrap, "store: rank %d disconnected without saying goodbye: %s", c.rank, reason)
	}
	c.out.close()
	<-writerDone
	s.unregister(c)
}

func (s *server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

func (s *server) readRequests(c *serverConn) error {
	for {
		f, err := readFrame(c.br)
		if err != nil {
			return err
		}
		if err := s.dispatch(c, f); err != nil {
			return err
		}
	}
}

// dispatch serves one request. Errors close the connection; problems the
// client should hear about (a conflicting Set) are error replies instead.
func (s *server) dispatch(c *serverConn, f frame) error {
	switch f.op {
	case opSet:
		if f.key == "" {
			c.out.push(errReply(f.id, "empty key"))
			return nil
		}
		s.set(c, f)
	case opGet:
		if f.key == "" {
			c.out.push(errReply(f.id, "empty key"))
			return nil
		}
		return s.get(c, f)
	case opCancel:
		s.cancel(c, f.id)
	case opStatus:
		s.status(c, f.id)
	case opProgress:
		return s.setProgress(c, f.value)
	case opProgressQuery:
		s.queryProgress(c, f.id)
	case opAbort:
		return s.abort(c, f)
	case opReady:
		s.setReady(c, f.id)
	case opPeerLost:
		return s.peerLost(c, f)
	case opBye:
		c.saidBye = true
		s.mu.Lock()
		s.setStateLocked(c.rank, rankFinished)
		s.mu.Unlock()
		c.out.push(frame{op: opOK, id: f.id})
	default:
		return fmt.Errorf("%w: unexpected %s frame from a client", errMalformed, opName(f.op))
	}
	return nil
}

func errReply(id uint32, msg string) frame {
	return frame{op: opErr, id: id, value: []byte(msg)}
}

// set stores a key once and wakes the Gets waiting for it. Setting the
// same value again is allowed, so a retried Set is harmless.
func (s *server) set(c *serverConn, f frame) {
	s.mu.Lock()
	if old, ok := s.values[f.key]; ok {
		s.mu.Unlock()
		if bytes.Equal(old, f.value) {
			c.out.push(frame{op: opOK, id: f.id})
		} else {
			c.out.push(errReply(f.id, fmt.Sprintf("key %q is already set to a different value (keys are write-once)", f.key)))
		}
		return
	}
	s.values[f.key] = f.value
	woken := s.waiting[f.key]
	delete(s.waiting, f.key)
	for _, w := range woken {
		delete(w.c.gets, w.id)
	}
	s.mu.Unlock()
	// The value is never modified, so every reply shares it.
	for _, w := range woken {
		w.c.out.push(frame{op: opValue, id: w.id, value: f.value})
	}
	c.out.push(frame{op: opOK, id: f.id})
}

// get answers at once if the key is set, else parks the request.
func (s *server) get(c *serverConn, f frame) error {
	s.mu.Lock()
	if v, ok := s.values[f.key]; ok {
		s.mu.Unlock()
		c.out.push(frame{op: opValue, id: f.id, value: v})
		return nil
	}
	defer s.mu.Unlock()
	if _, dup := c.gets[f.id]; dup {
		return fmt.Errorf("%w: get id %d is already waiting", errMalformed, f.id)
	}
	if len(c.gets) >= maxGetsPerConn {
		c.out.push(errReply(f.id, fmt.Sprintf("too many waiting gets on one connection (max %d)", maxGetsPerConn)))
		return nil
	}
	c.gets[f.id] = f.key
	s.waiting[f.key] = append(s.waiting[f.key], waiter{c: c, id: f.id})
	return nil
}

// cancel forgets a waiting Get whose caller gave up.
func (s *server) cancel(c *serverConn, id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key, ok := c.gets[id]; ok {
		s.dropWaiterLocked(c, id, key)
	}
}

func (s *server) dropWaiterLocked(c *serverConn, id uint32, key string) {
	delete(c.gets, id)
	ws := s.waiting[key]
	for i, w := range ws {
		if w.c == c && w.id == id {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.waiting, key)
	} else {
		s.waiting[key] = ws
	}
}

// unregister forgets c's waiting Gets and marks its rank finished.
func (s *server) unregister(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, key := range c.gets {
		s.dropWaiterLocked(c, id, key)
	}
	if s.ranks[c.rank] == c {
		s.ranks[c.rank] = nil
		if s.state[c.rank] != rankFinished {
			s.setStateLocked(c.rank, rankLost)
			s.lostLocked(c.rank)
		}
	}
}

// waitOthers waits until every rank but 0 has said goodbye or
// disconnected, or until timeout; it then names the ranks still missing.
// After a failed launch it waits only for the connected ranks, at most
// faultCloseWait.
func (s *server) waitOthers(timeout time.Duration) error {
	if s.faultCause() != "" {
		timeout = min(timeout, faultCloseWait)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		unseen, connected := s.pendingRanksLocked()
		if s.fault != "" {
			unseen = nil
		}
		changed := s.changed
		s.mu.Unlock()
		if len(unseen) == 0 && len(connected) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("after %v, ranks still connected: %s; ranks never connected: %s",
				timeout, rankList(connected), rankList(unseen))
		}
	}
}

func (s *server) pendingRanksLocked() (unseen, connected []int) {
	for r := 1; r < s.size; r++ {
		switch s.state[r] {
		case rankUnseen:
			unseen = append(unseen, r)
		case rankConnected:
			connected = append(connected, r)
		}
	}
	return unseen, connected
}

// rankList formats ranks briefly: "none", "3", "1 2 5", or the first few
// and a count.
func rankList(ranks []int) string {
	if len(ranks) == 0 {
		return "none"
	}
	sort.Ints(ranks)
	const show = 16
	var b bytes.Buffer
	for i, r := range ranks {
		if i == show {
			fmt.Fprintf(&b, " ... (%d in all)", len(ranks))
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

// stop closes the listener and every connection, and waits for the
// server's goroutines.
func (s *server) stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.stopping = true
	conns := make([]net.Conn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	close(s.quit)
	if s.ln != nil {
		s.ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
}

// outQueue holds one connection's replies until its writer sends them. It
// never blocks the request that queues a reply, so a client that is slow
// to read cannot stall the Set of another rank.
type outQueue struct {
	mu     sync.Mutex
	frames []frame
	closed bool
	wake   chan struct{} // capacity 1: "there is something to do"
}

func newOutQueue() *outQueue {
	return &outQueue{wake: make(chan struct{}, 1)}
}

func (q *outQueue) push(f frame) {
	q.mu.Lock()
	if !q.closed {
		q.frames = append(q.frames, f)
	}
	q.mu.Unlock()
	q.signal()
}

// close lets run send what is queued and return.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *outQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run writes queued frames to conn until close, then flushes the rest.
func (q *outQueue) run(conn net.Conn) error {
	bw := bufio.NewWriter(conn)
	for {
		<-q.wake
		q.mu.Lock()
		batch, closed := q.frames, q.closed
		q.frames = nil
		q.mu.Unlock()
		if len(batch) > 0 {
			conn.SetWriteDeadline(time.Now().Add(replyWriteTimeout))
			for _, f := range batch {
				if err := writeFrame(bw, f); err != nil {
					return err
				}
			}
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if closed {
			return nil
		}
	}
}

// isDisconnect reports whether err just means the peer went away.
func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
