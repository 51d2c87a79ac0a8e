package sparcml

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// Stall diagnosis. Every rank of a job made by Init publishes a progress
// record (the highest sequence number it has started, and the oldest it
// has not finished) to rank 0's store every progressEvery. When an
// operation times out, or has waited SPARCML_STALL_WARN, the rank asks the
// store for every rank's latest record: a rank whose record is older than
// silentAfter is named as silent (stopped, hung or cut off), a rank whose
// highest started operation is below the stalled one as behind. That
// names the rank that is late, not the neighbour this rank happened to
// wait on (who may be waiting for the late one itself).

const (
	// progressEvery is how often a rank publishes its progress: one
	// 20-byte message to rank 0 per interval, whatever the rate of
	// operations.
	progressEvery = 500 * time.Millisecond
	// silentAfter: a record this old means its rank stopped publishing;
	// four intervals, so a rank briefly descheduled is not blamed.
	silentAfter = 4 * progressEvery
	// queryTimeout bounds asking the store, which may itself be stopped.
	queryTimeout = time.Second
	// dumpEvery bounds how often failures rewrite the dump.
	dumpEvery = 200 * time.Millisecond
)

// diag is a communicator's flight recorder, progress publisher and stall
// watchdog.
type diag struct {
	c         *Comm
	rec       *recorder
	store     bootstrap.Store // nil: no progress (Local, NewComm)
	stallWarn time.Duration
	dumpDir   string
	log       *logging.Logger

	quit chan struct{}
	done chan struct{}
	sigs chan os.Signal

	mu       sync.Mutex
	warned   uint64    // the last seq warned about
	lastDump time.Time // of a failure's dump
	stuck    error     // the last operation to end timed out, with this error
}

// startDiag attaches the recorder to c and, for a job with a store,
// starts publishing progress and watching for stalls.
func (c *Comm) startDiag(s *config.Settings, store bootstrap.Store) {
	d := &diag{c: c, rec: newRecorder(s.FlightOps), stallWarn: s.StallWarn, dumpDir: s.DumpDir,
		log: c.log, quit: make(chan struct{}), done: make(chan struct{})}
	if store != nil && c.Size() > 1 {
		d.store = store
	}
	if d.dumpDir != "" {
		d.sigs = make(chan os.Signal, 1)
		signal.Notify(d.sigs, syscall.SIGUSR1)
	}
	c.diag = d
	if d.store == nil && d.sigs == nil {
		close(d.done) // nothing to watch: the recorder only
		return
	}
	go d.run()
}

// run publishes progress, warns of stalls and dumps on SIGUSR1 until stop.
func (d *diag) run() {
	defer close(d.done)
	var tick <-chan time.Time
	if d.store != nil {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		tick = t.C
		d.publish()
	}
	for {
		select {
		case <-d.quit:
			return
		case <-d.sigs:
			d.dump("SIGUSR1")
		case <-tick:
			d.publish()
			d.checkStall()
		}
	}
}

// stop ends run and, if an operation failed since the last dump, dumps.
func (d *diag) stop() {
	if d == nil {
		return
	}
	select {
	case <-d.quit:
		return
	default:
	}
	close(d.quit)
	<-d.done
	if d.sigs != nil {
		signal.Stop(d.sigs)
	}
	if d.rec.takeFailed() {
		d.dump("failure")
	}
}

// stuckErr returns the error of the last operation to end if it timed
// out (nil if it did not): the job is then stuck, and Close must neither
// wait for the other ranks nor close as if all were well.
func (d *diag) stuckErr() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stuck
}

func (d *diag) setStuck(err error) {
	d.mu.Lock()
	d.stuck = err
	d.mu.Unlock()
}

// recorded wraps fn to record the operation in the flight recorder and,
// when it fails, to name the late ranks (a timeout) and dump.
func (c *Comm) recorded(kind string, fn opFunc) opFunc {
	d := c.diag
	if d == nil {
		return fn
	}
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		slot := d.rec.begin(kind, op.Seq)
		algo, err := fn(op, cc)
		timedOut := err != nil && isTimeout(err)
		if timedOut && d.store != nil {
			err = &stallError{err: err, report: d.stallReport(op.Seq)}
		}
		d.rec.end(slot, op, algo, err)
		if timedOut || err == nil || lostElsewhere(err) {
			d.setStuck(err)
		}
		if err != nil {
			reason := "failure"
			if timedOut {
				reason = "timeout"
			}
			d.dumpFailure(reason)
		}
		return algo, err
	}
}

// lostElsewhere reports whether err comes from another rank's loss: this
// rank saw the peer go, or another rank failed the operation for it. Close
// then tells the peers why this rank goes (its goodbye carries err), so a
// peer that learns of the failure from this rank's close, before it sees
// the lost rank itself, still names the rank that was lost.
func lostElsewhere(err error) bool {
	var rf *transport.RemoteFailure
	return errors.Is(err, transport.ErrPeerLost) || errors.As(err, &rf)
}

// isTimeout reports whether err is a deadline, this rank's or the one of
// the peer that failed the operation for every rank (a RemoteFailure of
// transport.CodeTimeout matches context.DeadlineExceeded: the first rank
// to time out fails the others' operation before their own deadlines,
// and they must name the late rank too).
func isTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// stallError is a timed-out operation's error with the report of which
// ranks are late.
type stallError struct {
	err    error
	report string
}

func (e *stallError) Error() string { return e.err.Error() + "; " + e.report }
func (e *stallError) Unwrap() error { return e.err }

// progressRecord is what a rank publishes: the highest seq started and
// the oldest not finished (0: none), 8 bytes each, big-endian.
const progressRecordLen = 16

func encodeProgressRecord(started, oldest uint64) []byte {
	b := make([]byte, progressRecordLen)
	binary.BigEndian.PutUint64(b, started)
	binary.BigEndian.PutUint64(b[8:], oldest)
	return b
}

func decodeProgressRecord(b []byte) (started, oldest uint64, err error) {
	if len(b) != progressRecordLen {
		return 0, 0, fmt.Errorf("progress record of %d bytes, want %d", len(b), progressRecordLen)
	}
	started, oldest = binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
	if oldest > started {
		return 0, 0, fmt.Errorf("progress record: oldest unfinished seq %d beyond the highest started %d", oldest, started)
	}
	return started, oldest, nil
}

func (d *diag) publish() {
	started, oldest := d.rec.progress()
	if err := bootstrap.PublishProgress(d.store, encodeProgressRecord(started, oldest)); err != nil {
		d.log.Infof(logging.Coll, "publishing progress: %v", err)
	}
}

// checkStall warns, once per operation, when the oldest operation in
// flight has waited SPARCML_STALL_WARN.
func (d *diag) checkStall() {
	if d.stallWarn <= 0 {
		return
	}
	op, ok := d.rec.oldestInFlight()
	if !ok || time.Since(op.Start) < d.stallWarn {
		return
	}
	d.mu.Lock()
	already := op.Seq <= d.warned
	d.warned = max(d.warned, op.Seq)
	d.mu.Unlock()
	if already {
		return
	}
	d.log.Warnf(logging.Coll, "%s seq %d has waited %v (SPARCML_STALL_WARN): %s",
		op.Kind, op.Seq, time.Since(op.Start).Round(time.Millisecond), d.stallReport(op.Seq))
}

// stallReport asks the store where every other rank stands and names the
// ones late for operation seq.
func (d *diag) stallReport(seq uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ps, err := bootstrap.QueryProgress(ctx, d.store)
	if err != nil {
		return fmt.Sprintf("cannot ask the rendezvous store on rank 0 which ranks are late (rank 0 stopped or hung?): %v", err)
	}
	return lateRanks(d.c.Rank(), seq, ps)
}

// lateRanks names, from every rank's progress, the ranks late for seq:
// silent ones, then those behind.
func lateRanks(self int, seq uint64, ps []bootstrap.RankProgress) string {
	var silent, behind, never []string
	for _, p := range ps {
		if p.Rank == self {
			continue
		}
		if !p.Seen {
			never = append(never, fmt.Sprint(p.Rank))
			continue
		}
		started, _, err := decodeProgressRecord(p.Value)
		if err != nil {
			never = append(never, fmt.Sprint(p.Rank))
			continue
		}
		switch {
		case p.Age > silentAfter:
			silent = append(silent, fmt.Sprintf("rank %d silent for %v (stopped, hung or cut off?), last reported at seq %d",
				p.Rank, p.Age.Round(100*time.Millisecond), started))
		case started < seq:
			behind = append(behind, fmt.Sprintf("rank %d has not started seq %d (at seq %d, %d behind)", p.Rank, seq, started, seq-started))
		}
	}
	parts := append(silent, behind...)
	if len(never) > 0 {
		parts = append(parts, "no progress from ranks "+strings.Join(never, " "))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("late ranks: none, every rank has started seq %d and is alive", seq)
	}
	return "late ranks: " + strings.Join(parts, "; ")
}

// dumpFailure dumps after a failed operation, at most every dumpEvery
// (stop dumps the rest).
func (d *diag) dumpFailure(reason string) {
	if d.dumpDir == "" {
		return
	}
	d.mu.Lock()
	recent := time.Since(d.lastDump) < dumpEvery
	if !recent {
		d.lastDump = time.Now()
	}
	d.mu.Unlock()
	if !recent {
		d.rec.takeFailed()
		d.dump(reason)
	}
}

// dump writes the flight recorder to SPARCML_DUMP_DIR.
func (d *diag) dump(reason string) {
	if d.dumpDir == "" {
		return
	}
	ops, started := d.rec.snapshot()
	host, _ := os.Hostname()
	fd := &FlightDump{Version: flightDumpVersion, Rank: d.c.Rank(), Size: d.c.Size(), Host: host, PID: os.Getpid(),
		Time: time.Now(), Reason: reason, Started: started, Ops: ops, Peers: d.peers()}
	path, err := writeFlightDump(d.dumpDir, fd)
	if err != nil {
		d.log.Warnf(logging.Coll, "writing the flight recorder to SPARCML_DUMP_DIR: %v", err)
		return
	}
	d.log.Warnf(logging.Coll, "flight recorder (%s) written to %s", reason, path)
}

// peers is every rank's progress as the store has it, for a dump.
func (d *diag) peers() []FlightPeer {
	if d.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ps, err := bootstrap.QueryProgress(ctx, d.store)
	if err != nil {
		return nil
	}
	var out []FlightPeer
	for _, p := range ps {
		if started, _, err := decodeProgressRecord(p.Value); p.Seen && err == nil {
			out = append(out, FlightPeer{Rank: p.Rank, Started: started, SilentMS: p.Age.Milliseconds()})
		}
	}
	return out
}
