package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// A broken launch (a wrong token, a size that disagrees, a duplicate rank,
// a rank that never arrives) is seen by rank 0's store first. The store
// then fails the launch: every connected rank gets the cause at once
// (opFault) instead of waiting for its own SPARCML_INIT_TIMEOUT, and
// every later request and hello is refused with it.

// wrongTokenGrace is how long the store waits, after a connection that
// claimed rank r failed authentication, for a genuine rank r before it
// fails the launch. A stranger probing the port during the launch is
// refused without harm when the real rank arrives within it; a rank
// launched with the wrong token exits at once and never does.
const wrongTokenGrace = 3 * time.Second

// faultCloseWait bounds rank 0's Close after a failed launch: the ranks
// still connected have the cause and close at once; ranks never seen are
// not waited for.
const faultCloseWait = 2 * time.Second

// LaunchError is a failed launch as the store saw it: Cause says why
// ("rank 1 presented a wrong token") and Code classifies it, the same on
// every rank: transport.CodeInvalid for an inconsistent launch (a wrong
// token, a size that disagrees, a duplicate rank), CodeTimeout for ranks
// that never arrived, CodePeerLost for ranks that left, and the code of
// a rank's own Init failure for that.
type LaunchError struct {
	Code  transport.Code
	Cause string
}

func (e *LaunchError) Error() string { return "the launch failed: " + e.Cause }

// Unwrap gives the code's sentinel (if it has one) to errors.Is.
func (e *LaunchError) Unwrap() error { return e.Code.Err() }

// A launch's failure travels (opFault, and opAbort from the rank whose
// Init failed) as its code and its text:
//
//	code  uint8 (transport.Code)
//	cause [n]byte
func encodeFault(code transport.Code, cause string) []byte {
	return append([]byte{byte(code)}, cause...)
}

// decodeFault parses an encoded failure of the launch; a code this build
// does not know is kept (the error then matches no sentinel).
func decodeFault(b []byte) (*LaunchError, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: an empty launch failure", errMalformed)
	}
	return &LaunchError{Code: transport.Code(b[0]), Cause: string(b[1:])}, nil
}

// The claim precedes authentication on a store connection: which rank
// the dialer says it is, so that a failed authentication can be blamed
// on a rank. It is not trusted for anything else.
//
//	magic   [4]byte "SPCL"
//	version uint16  protocolVersion
//	rank    uint32
const claimLen = 4 + 2 + 4

var claimMagic = [4]byte{'S', 'P', 'C', 'L'}

func encodeClaim(rank int) []byte {
	b := make([]byte, claimLen)
	copy(b, claimMagic[:])
	binary.BigEndian.PutUint16(b[4:], protocolVersion)
	binary.BigEndian.PutUint32(b[6:], uint32(rank))
	return b
}

// decodeClaim parses a claim; a wrong magic or version is an error.
func decodeClaim(b []byte) (rank uint32, err error) {
	if len(b) != claimLen {
		return 0, fmt.Errorf("%w: claim of %d bytes, want %d", errMalformed, len(b), claimLen)
	}
	if [4]byte(b[:4]) != claimMagic {
		return 0, fmt.Errorf("%w: not a sparcml store client (bad magic %q)", errMalformed, b[:4])
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != protocolVersion {
		return 0, fmt.Errorf("store protocol version %d, rank 0 speaks %d (mixed sparcml versions?)", v, protocolVersion)
	}
	return binary.BigEndian.Uint32(b[6:]), nil
}

// readClaim reads the claim of a new connection before deadline.
func readClaim(conn net.Conn, deadline time.Time) (uint32, error) {
	conn.SetReadDeadline(deadline)
	defer conn.SetReadDeadline(time.Time{})
	b := make([]byte, claimLen)
	if _, err := io.ReadFull(conn, b); err != nil {
		return 0, fmt.Errorf("reading claim: %w", noEOF(err))
	}
	return decodeClaim(b)
}

// launchIncompleteLocked reports whether some rank has never connected:
// refusals of job ranks only fail the launch then.
func (s *server) launchIncompleteLocked() bool {
	for _, st := range s.state {
		if st == rankUnseen {
			return true
		}
	}
	return false
}

// failLaunch records cause, of code, as the launch's failure (the first
// one wins) and tells every connected rank but except (nil for none). It
// returns the recorded cause.
func (s *server) failLaunch(code transport.Code, cause string, except *serverConn) string {
	s.mu.Lock()
	if s.fault != "" {
		defer s.mu.Unlock()
		return s.fault
	}
	s.fault, s.faultCode = cause, code
	conns := make([]*serverConn, 0, len(s.ranks))
	for _, c := range s.ranks {
		if c != nil && c != except {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	s.log.Warnf(logging.Bootstrap, "store: the launch failed: %s", cause)
	for _, c := range conns {
		c.out.push(frame{op: opFault, value: encodeFault(code, cause)})
	}
	return cause
}

func (s *server) faultCause() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

// faultFrame is the opFault frame, with id, telling a rank why the launch
// failed.
func (s *server) faultFrame(id uint32) frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return frame{op: opFault, id: id, value: encodeFault(s.faultCode, s.fault)}
}

// wrongToken handles a connection that claimed rank and failed
// authentication: unless the real rank arrives within wrongTokenGrace,
// the launch fails naming it.
func (s *server) wrongToken(rank uint32) {
	if int64(rank) >= int64(s.size) {
		return
	}
	s.mu.Lock()
	relevant := s.state[rank] == rankUnseen
	s.mu.Unlock()
	if !relevant {
		return
	}
	timer := time.NewTimer(wrongTokenGrace)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.quit:
		return
	}
	s.mu.Lock()
	still := s.state[rank] == rankUnseen && !s.stopping
	s.mu.Unlock()
	if still {
		s.failLaunch(transport.CodeInvalid, fmt.Sprintf("rank %d presented a wrong token (its SPARCML_TOKEN differs from rank 0's)", rank), nil)
	}
}

// LaunchStatus asks the store which ranks have never connected to it
// (missing) and which left it without a goodbye (lost: killed or crashed),
// for an error that names them. It works on the stores Connect returns;
// on others it returns nothing and no error.
func LaunchStatus(ctx context.Context, st Store) (missing, lost []int, err error) {
	c, ok := st.(*client)
	if !ok {
		return nil, nil, nil
	}
	r, err := c.call(ctx, frame{op: opStatus})
	if err != nil {
		return nil, nil, err
	}
	if r.op != opValue {
		return nil, nil, replyError(r)
	}
	if len(r.value) < 4 {
		return nil, nil, fmt.Errorf("%w: status of %d bytes", errMalformed, len(r.value))
	}
	nMissing := int(binary.BigEndian.Uint32(r.value))
	ranks, err := decodeRanks(r.value[4:])
	if err != nil || nMissing > len(ranks) {
		return nil, nil, fmt.Errorf("%w: status of %d bytes for %d missing ranks", errMalformed, len(r.value), nMissing)
	}
	return ranks[:nMissing], ranks[nMissing:], nil
}

// FailLaunch, on rank 0, fails the launch with cause, of code: every rank
// still waiting on the store gets it at once, and rank 0's Close then
// waits only briefly. It does nothing on other ranks' stores.
func FailLaunch(st Store, code transport.Code, cause string) {
	if c, ok := st.(*client); ok && c.srv != nil {
		c.srv.failLaunch(code, cause, nil)
	}
}

// status answers opStatus: the number of ranks never connected, those
// ranks, then the ranks that disconnected without a goodbye.
func (s *server) status(c *serverConn, id uint32) {
	s.mu.Lock()
	var unseen, lost []int
	for r, st := range s.state {
		switch st {
		case rankUnseen:
			unseen = append(unseen, r)
		case rankLost:
			lost = append(lost, r)
		}
	}
	s.mu.Unlock()
	value := binary.BigEndian.AppendUint32(nil, uint32(len(unseen)))
	value = append(value, encodeRanks(append(unseen, lost...))...)
	c.out.push(frame{op: opValue, id: id, value: value})
}

func encodeRanks(ranks []int) []byte {
	b := make([]byte, 4*len(ranks))
	for i, r := range ranks {
		binary.BigEndian.PutUint32(b[4*i:], uint32(r))
	}
	return b
}

func decodeRanks(b []byte) ([]int, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: rank list of %d bytes", errMalformed, len(b))
	}
	ranks := make([]int, len(b)/4)
	for i := range ranks {
		ranks[i] = int(binary.BigEndian.Uint32(b[4*i:]))
	}
	return ranks, nil
}

// asLaunchError finds a LaunchError in err.
func asLaunchError(err error) (*LaunchError, bool) {
	var le *LaunchError
	ok := errors.As(err, &le)
	return le, ok
}

// OnLaunchFailure calls f, once, if the store fails the launch or the
// connection to it is lost before stop is called; Init cancels itself
// with the error (a *LaunchError, or the lost store), since a rank may be
// waiting on its transport's connections rather than on the store, and a
// job whose rank 0 is gone cannot start.
func OnLaunchFailure(st Store, f func(error)) (stop func()) {
	c, ok := st.(*client)
	if !ok {
		return func() {}
	}
	quit := make(chan struct{})
	go func() {
		select {
		case <-c.readerDone:
			if err := c.stickyErr(); err != nil && !errors.Is(err, ErrStoreClosed) {
				f(err)
			}
		case <-quit:
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit) }) }
}

// ReportInitFailure tells rank 0's store that this rank's Init failed
// with err. The store then fails the launch naming this rank and err, so
// the ranks still in Init fail at once instead of waiting for
// SPARCML_INIT_TIMEOUT on connections this rank will never make.
//
// When err is a transport's *PeerError for a lost peer, the store
// checks whether that peer's store connection ended too: if so, the
// launch fails naming the peer (it died), the cause every rank reports.
//
// If the launch had already failed, its first cause is returned as a
// *LaunchError: this rank's error is then most likely a consequence (a
// connection to a rank that was already leaving), and the caller names
// that cause instead; so is the store's loss (rank 0 died). It returns
// nil when this rank's report became the cause, when err itself came from
// the store, or when the store does not answer within a second.
func ReportInitFailure(st Store, err error) *LaunchError {
	c, ok := st.(*client)
	if !ok {
		return nil
	}
	if _, fromStore := asLaunchError(err); fromStore {
		return nil
	}
	cause := err.Error()
	if len(cause) > maxAbortLen {
		cause = cause[:maxAbortLen] + "..."
	}
	if peer, ok := lostPeer(err); ok {
		return reportPeerLost(c, peer, cause)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, rerr := c.call(ctx, frame{op: opAbort, value: encodeFault(transport.CodeOf(err), cause)})
	return reportAnswer(rerr)
}

// reportAnswer is the launch's cause as a failure report's error says it:
// the launch's failure, or the store lost (rank 0 died: that, not this
// rank's error, which is likely a consequence, is the cause).
func reportAnswer(err error) *LaunchError {
	if le, ok := asLaunchError(err); ok {
		return le
	}
	if errors.Is(err, errStoreLost) {
		return &LaunchError{Code: transport.CodePeerLost, Cause: err.Error()}
	}
	return nil
}

// abort answers opAbort: the reporting rank's failure, with its code,
// becomes the launch's unless another cause came first, which the reply
// carries.
func (s *server) abort(c *serverConn, f frame) error {
	failure, err := decodeFault(f.value)
	if err != nil {
		return err
	}
	mine := fmt.Sprintf("rank %d failed Init: %s", c.rank, failure.Cause)
	if cause := s.failLaunch(failure.Code, mine, c); cause != mine {
		c.out.push(s.faultFrame(f.id))
		return nil
	}
	c.out.push(frame{op: opOK, id: f.id})
	return nil
}

// maxAbortLen bounds the cause a rank reports, which every rank repeats.
const maxAbortLen = 1024

// ShortenClose makes rank 0's Close wait at most faultCloseWait for the
// other ranks, for a job that failed: a rank that is stopped or hung
// would otherwise hold it for the full wait.
func ShortenClose(st Store) {
	if c, ok := st.(*client); ok {
		c.closeWait = min(c.closeWait, faultCloseWait)
	}
}
