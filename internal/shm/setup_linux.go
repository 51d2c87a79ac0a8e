//go:build linux

package shm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// handshakeTimeout bounds one connection's authentication and hellos.
const handshakeTimeout = 10 * time.Second

// Set-up, on every rank of the host:
//
//  1. create the inbox (a sealed memfd) and map it;
//  2. listen on an abstract unix socket with a random name (abstract
//     sockets live in their network namespace, so ranks of emulated
//     hosts in different namespaces can never connect, and nothing is
//     left in the file system) and publish the name in the store;
//  3. dial every lower rank of Peers and accept every higher one; on each
//     connection, authenticate with the job token, exchange hellos with
//     the inboxes' descriptors attached, map the peer's inbox, read the
//     peer's probe from its memory and exchange the verdicts;
//  4. close the inbox's descriptor and the listener: from then on the
//     mappings are all that holds the inboxes, and the kernel frees them
//     with the last process that maps them, however it ends.
func (t *Transport) setup(ctx context.Context) error {
	cfg := &t.cfg
	ringSize := cfg.RingSize
	if _, err := rand.Read(t.probe[:]); err != nil {
		return err
	}
	size := inboxSize(len(cfg.Peers)-1, ringSize)
	fd, mem, err := createInbox(fmt.Sprintf("sparcml-shm-r%d", t.rank), size)
	if err != nil {
		return fmt.Errorf("shm: rank %d: creating its %d-byte shared inbox: %w", t.rank, size, err)
	}
	defer closeFD(fd)
	t.inbox = mem
	t.seq, t.awake, t.closed = word32(mem, offSeq), word32(mem, offAwake), word32(mem, offClosed)
	for _, r := range cfg.Peers {
		if r == t.rank {
			continue
		}
		off := regionOffset(localIndex(cfg.Peers, t.rank, r), ringSize)
		p := &peer{t: t, rank: r, in: inRing{ringWords: ringAt(mem, off, ringSize)},
			mySlots: mem[off+offSlots : off+offSlots+4*rndvSlots]}
		t.peers[r] = p
		t.local = append(t.local, p)
	}
	if len(t.local) == 0 {
		return nil
	}
	if !cfg.NoSingleCopy {
		_ = allowReaders() // the probe below finds whether reads work
	}
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	name := fmt.Sprintf("@sparcml-shm-%x-%d", nonce, t.rank)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fmt.Errorf("shm: rank %d: listening on abstract socket %s: %w", t.rank, name, err)
	}
	defer ln.Close()
	if err := cfg.Store.Set(ctx, t.addrKey(t.rank), []byte(name)); err != nil {
		return fmt.Errorf("shm: rank %d: publishing its socket name: %w", t.rank, err)
	}
	if err := t.connect(ctx, ln, fd); err != nil {
		for _, p := range t.local {
			if p.conn != nil {
				p.conn.Close()
			}
		}
		return err
	}
	t.logSetup()
	return nil
}

func (t *Transport) addrKey(rank int) string {
	return t.cfg.KeyPrefix + "/addr/" + strconv.Itoa(rank)
}

// connect dials every lower peer and accepts every higher one, each
// handshake on its own goroutine, until all are connected. A connection
// that fails its handshake on the accepting side is refused and logged
// (it may be a stranger); any other failure ends the set-up.
func (t *Transport) connect(ctx context.Context, ln *net.UnixListener, fd int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopListen := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopListen()
	results := make(chan error, len(t.local))
	var reserve sync.Mutex // guards the peers' conn during set-up
	var wg sync.WaitGroup
	for _, p := range t.local {
		if p.rank < t.rank {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- t.dial(ctx, p, fd, &reserve)
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return // closed once everyone is connected, or ctx ended
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := t.handshake(ctx, c, nil, fd, &reserve); err != nil {
					c.Close()
					if ctx.Err() == nil {
						t.cfg.Logf("shm: refused a connection: %v", err)
					}
					return
				}
				results <- nil
			}()
		}
	}()
	var first error
	for connected := 0; connected < len(t.local) && first == nil; {
		select {
		case err := <-results:
			if err != nil {
				first = err
			}
			connected++
		case <-ctx.Done():
			first = fmt.Errorf("shm: rank %d: waiting for %s to connect: %w", t.rank, transport.RankList(t.unconnected(&reserve)), ctx.Err())
		}
	}
	cancel()
	ln.Close()
	wg.Wait()
	return first
}

func (t *Transport) unconnected(reserve *sync.Mutex) []int {
	reserve.Lock()
	defer reserve.Unlock()
	var ranks []int
	for _, p := range t.local {
		if p.conn == nil {
			ranks = append(ranks, p.rank)
		}
	}
	return ranks
}

// dial connects to a lower peer through the socket name it published.
func (t *Transport) dial(ctx context.Context, p *peer, fd int, reserve *sync.Mutex) error {
	name, err := t.cfg.Store.Get(ctx, t.addrKey(p.rank))
	if err != nil {
		return fmt.Errorf("shm: rank %d: looking up rank %d's socket: %w", t.rank, p.rank, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", string(name))
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.ECONNREFUSED) {
			hint = fmt.Sprintf(" (no such socket in this network namespace: is rank %d on another host, or in another namespace?)", p.rank)
		}
		return fmt.Errorf("shm: rank %d: connecting to rank %d at %s: %w%s", t.rank, p.rank, name, transport.LostInSetup(p.rank, err), hint)
	}
	if err := t.handshake(ctx, c.(*net.UnixConn), p, fd, reserve); err != nil {
		c.Close()
		return fmt.Errorf("shm: rank %d: connecting to rank %d: %w", t.rank, p.rank, transport.LostInSetup(p.rank, err))
	}
	return nil
}

// handshake authenticates c and exchanges hellos, inboxes and verdicts
// with the peer at its other end: want when this rank dialled, whoever
// the hello names (a higher peer not yet connected) when it accepted.
func (t *Transport) handshake(ctx context.Context, c *net.UnixConn, want *peer, fd int, reserve *sync.Mutex) error {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	client := want != nil
	if err := bootstrap.Authenticate(c, t.cfg.Token, client, deadline); err != nil {
		return err
	}
	_ = c.SetDeadline(deadline)
	var mine, theirs [helloSize]byte
	encodeHello(mine[:], t.myHello())
	if client {
		if err := writeWithFD(c, mine[:], fd); err != nil {
			return fmt.Errorf("sending hello: %w", err)
		}
	}
	theirFD, err := readWithFD(c, theirs[:])
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	h, err := decodeHello(theirs[:])
	if err == nil {
		err = t.checkHello(&h, want)
	}
	if err != nil {
		closeFD(theirFD)
		return err
	}
	p := t.peers[h.rank]
	reserve.Lock()
	dup := p.conn != nil
	if !dup {
		p.conn = c
	}
	reserve.Unlock()
	if dup {
		closeFD(theirFD)
		return fmt.Errorf("a second connection from rank %d", h.rank)
	}
	if !client {
		if err := writeWithFD(c, mine[:], fd); err != nil {
			closeFD(theirFD)
			return fmt.Errorf("sending hello to rank %d: %w", h.rank, err)
		}
	}
	if err := t.attach(p, c, theirFD); err != nil { // closes theirFD
		return err
	}
	verdict := t.probePeer(p, &h)
	var v [verdictSize]byte
	encodeVerdict(v[:], verdict)
	if _, err := c.Write(v[:]); err != nil {
		return fmt.Errorf("sending verdict to rank %d: %w", p.rank, err)
	}
	if _, err := readFull(c, v[:]); err != nil {
		return fmt.Errorf("reading rank %d's verdict: %w", p.rank, err)
	}
	theirVerdict, err := decodeVerdict(v[:])
	if err != nil {
		return err
	}
	p.canPull, p.pullsFromMe = verdict == 0, theirVerdict == 0
	p.verdict = verdict
	_ = c.SetDeadline(time.Time{})
	if !stop() {
		return ctx.Err()
	}
	return nil
}

func (t *Transport) myHello() *hello {
	h := &hello{rank: uint32(t.rank), size: uint32(t.size), peersHash: hashPeers(t.cfg.Peers),
		ringSize: uint32(t.cfg.RingSize), slots: rndvSlots, inboxSize: uint64(len(t.inbox)),
		probeAddr: addrOf(t.probe[:]), probe: t.probe}
	if t.cfg.NoSingleCopy {
		h.flags |= flagNoSingleCopy
	}
	return h
}

// checkHello compares a peer's hello with this rank's view of the job.
func (t *Transport) checkHello(h *hello, want *peer) error {
	r := int(h.rank)
	switch {
	case int(h.size) != t.size:
		return fmt.Errorf("rank %d says the job has %d ranks, this rank %d", r, h.size, t.size)
	case h.peersHash != hashPeers(t.cfg.Peers):
		return fmt.Errorf("rank %d has another list of the ranks on this host than this rank's %v", r, t.cfg.Peers)
	case int(h.ringSize) != t.cfg.RingSize || h.slots != rndvSlots || h.inboxSize != uint64(len(t.inbox)):
		return fmt.Errorf("rank %d uses rings of %d bytes (%d slots, inbox %d), this rank %d (%d, %d): all ranks need the same RingSize",
			r, h.ringSize, h.slots, h.inboxSize, t.cfg.RingSize, rndvSlots, len(t.inbox))
	case want != nil && r != want.rank:
		return fmt.Errorf("expected a hello from rank %d, got rank %d", want.rank, r)
	case want == nil && (r <= t.rank || r >= t.size || t.peers[r] == nil):
		return fmt.Errorf("hello from rank %d, but only the higher ranks of %v connect to rank %d", r, t.cfg.Peers, t.rank)
	}
	return nil
}

// attach maps the peer's inbox and finds this rank's words in it.
func (t *Transport) attach(p *peer, c *net.UnixConn, fd int) error {
	pid, err := peerPID(c)
	if err != nil {
		closeFD(fd)
		return fmt.Errorf("rank %d's credentials: %w", p.rank, err)
	}
	p.pid = pid
	mem, err := mapInbox(fd, len(t.inbox))
	if err != nil {
		return fmt.Errorf("mapping rank %d's inbox: %w", p.rank, err)
	}
	off := regionOffset(localIndex(t.cfg.Peers, p.rank, t.rank), t.cfg.RingSize)
	p.remote = mem
	p.remoteSeq, p.remoteAwake, p.remoteClose = word32(mem, offSeq), word32(mem, offAwake), word32(mem, offClosed)
	p.out = outRing{ringWords: ringAt(mem, off, t.cfg.RingSize)}
	p.theirSlots = mem[off+offSlots : off+offSlots+4*rndvSlots]
	return nil
}

// probePeer reads the peer's probe from its memory: 0 if that works and
// large messages from the peer may be read straight from its buffers,
// otherwise why not.
func (t *Transport) probePeer(p *peer, h *hello) uint32 {
	switch {
	case t.cfg.NoSingleCopy || h.flags&flagNoSingleCopy != 0:
		return verdictOff
	case p.pid <= 0:
		return verdictInvisible
	case h.probeAddr == 0:
		return verdictBadAddress
	}
	got := make([]byte, probeSize)
	if err := pullFrom(p.pid, got, []remoteBuf{{h.probeAddr, probeSize}}); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && errno != 0 {
			return uint32(errno)
		}
		return verdictMismatch
	}
	if !bytes.Equal(got, h.probe[:]) {
		return verdictMismatch
	}
	return 0
}

func verdictText(v uint32) string {
	switch v {
	case 0:
		return "read"
	case verdictOff:
		return "single copy turned off (NoSingleCopy)"
	case verdictMismatch:
		return "the probe read other bytes than expected"
	case verdictInvisible:
		return "its process is not visible in this pid namespace"
	case verdictBadAddress:
		return "no probe address"
	}
	msg := syscall.Errno(v).Error()
	if syscall.Errno(v) == syscall.EPERM {
		msg += " (ptrace restrictions: Yama ptrace_scope, a container, seccomp?)"
	}
	return msg
}

// logSetup says, once, how large messages travel and why.
func (t *Transport) logSetup() {
	var single []int
	refused := map[string][]int{}
	for _, p := range t.local {
		if p.canPull {
			single = append(single, p.rank)
		} else {
			refused[verdictText(p.verdict)] = append(refused[verdictText(p.verdict)], p.rank)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shm: %d peers on this host (ranks %v), rings of %d KiB", len(t.local), t.cfg.Peers, t.cfg.RingSize>>10)
	if t.cfg.Spin > 0 {
		fmt.Fprintf(&b, ", waiters poll for %v before they sleep", t.cfg.Spin)
	} else {
		fmt.Fprintf(&b, ", waiters sleep at once (%d ranks on %d CPUs)", len(t.cfg.Peers), onlineCPUs())
	}
	if len(single) > 0 {
		fmt.Fprintf(&b, "; messages above %d bytes from ranks %v are read straight from the sender's memory (process_vm_readv)", t.cfg.SingleCopyLimit, single)
	}
	for why, ranks := range refused {
		fmt.Fprintf(&b, "; messages from ranks %v all go through the rings: %s", ranks, why)
	}
	t.cfg.Logf("%s", b.String())
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := c.Read(b[got:])
		got += n
		if err != nil {
			return got, err
		}
	}
	return got, nil
}
