package flight

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

// Watch is a communicator's flight recorder, progress publisher and stall
// watchdog.
type Watch struct {
	rank, size int
	rec        *Recorder
	store      bootstrap.Store // nil: no progress (Local, NewComm)
	stallWarn  time.Duration
	dumpDir    string
	log        *logging.Logger

	quit chan struct{}
	done chan struct{}
	sigs chan os.Signal

	mu       sync.Mutex
	warned   uint64    // the last seq warned about
	lastDump time.Time // of a failure's dump
	stuck    error     // the last operation to end timed out, with this error
}

// Config is what a Watch needs to know of its communicator.
type Config struct {
	Rank, Size int
	FlightOps  int           // SPARCML_FLIGHT_OPS
	StallWarn  time.Duration // SPARCML_STALL_WARN
	DumpDir    string        // SPARCML_DUMP_DIR
	Store      bootstrap.Store
	Log        *logging.Logger
}

// Start makes the recorder of a communicator and, for a job with a
// store, starts publishing progress and watching for stalls.
func Start(cfg Config) *Watch {
	d := &Watch{rank: cfg.Rank, size: cfg.Size, rec: NewRecorder(cfg.FlightOps), stallWarn: cfg.StallWarn,
		dumpDir: cfg.DumpDir, log: cfg.Log, quit: make(chan struct{}), done: make(chan struct{})}
	if cfg.Store != nil && cfg.Size > 1 {
		d.store = cfg.Store
	}
	if d.dumpDir != "" {
		d.sigs = make(chan os.Signal, 1)
		signal.Notify(d.sigs, syscall.SIGUSR1)
	}
	if d.store == nil && d.sigs == nil {
		close(d.done) // nothing to watch: the recorder only
		return d
	}
	go d.run()
	return d
}

// run publishes progress, warns of stalls and dumps on SIGUSR1 until stop.
func (d *Watch) run() {
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

// Stop ends run and, if an operation failed since the last dump, dumps.
func (d *Watch) Stop() {
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
	if d.rec.TakeFailed() {
		d.dump("failure")
	}
}

// StuckErr returns the error of the last operation to end if it timed
// out (nil if it did not): the job is then stuck, and Close must neither
// wait for the other ranks nor close as if all were well.
func (d *Watch) StuckErr() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stuck
}

func (d *Watch) setStuck(err error) {
	d.mu.Lock()
	d.stuck = err
	d.mu.Unlock()
}

// Begin records an operation's start and returns its slot for End.
func (d *Watch) Begin(kind string, seq uint64) int { return d.rec.Begin(kind, seq) }

// End records how the operation of slot ended and returns its error:
// after a timeout, with the report of which ranks are late (a
// *StallError); a failure also dumps the recorder.
func (d *Watch) End(slot int, op *collectives.Op, algo collectives.Algo, err error) error {
	timedOut := err != nil && IsTimeout(err)
	if timedOut && d.store != nil {
		err = &StallError{err: err, report: d.stallReport(op.Seq)}
	}
	d.rec.End(slot, op, algo, err)
	if timedOut || err == nil || LostElsewhere(err) {
		d.setStuck(err)
	}
	if err != nil {
		reason := "failure"
		if timedOut {
			reason = "timeout"
		}
		d.dumpFailure(reason)
	}
	return err
}

// LostElsewhere reports whether err comes from another rank's loss: this
// rank saw the peer go, or another rank failed the operation for it. Close
// then tells the peers why this rank goes (its goodbye carries err), so a
// peer that learns of the failure from this rank's close, before it sees
// the lost rank itself, still names the rank that was lost.
func LostElsewhere(err error) bool {
	var rf *transport.RemoteFailure
	return errors.Is(err, transport.ErrPeerLost) || errors.As(err, &rf)
}

// IsTimeout reports whether err is a deadline, this rank's or the one of
// the peer that failed the operation for every rank (a RemoteFailure of
// transport.CodeTimeout matches context.DeadlineExceeded: the first rank
// to time out fails the others' operation before their own deadlines,
// and they must name the late rank too).
func IsTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// StallError is a timed-out operation's error with the report of which
// ranks are late.
type StallError struct {
	err    error
	report string
}

// Error is the operation's error, then the report.
func (e *StallError) Error() string { return e.err.Error() + "; " + e.report }

// Unwrap gives the operation's error to errors.Is and As.
func (e *StallError) Unwrap() error { return e.err }

// Report is the report of which ranks are late.
func (e *StallError) Report() string { return e.report }

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

func (d *Watch) publish() {
	started, oldest := d.rec.Progress()
	if err := bootstrap.PublishProgress(d.store, encodeProgressRecord(started, oldest)); err != nil {
		d.log.Infof(logging.Coll, "publishing progress: %v", err)
	}
}

// checkStall warns, once per operation, when the oldest operation in
// flight has waited SPARCML_STALL_WARN.
func (d *Watch) checkStall() {
	if d.stallWarn <= 0 {
		return
	}
	op, ok := d.rec.OldestInFlight()
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
func (d *Watch) stallReport(seq uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ps, err := bootstrap.QueryProgress(ctx, d.store)
	if err != nil {
		return fmt.Sprintf("cannot ask the rendezvous store on rank 0 which ranks are late (rank 0 stopped or hung?): %v", err)
	}
	return lateRanks(d.rank, seq, ps)
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
func (d *Watch) dumpFailure(reason string) {
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
		d.rec.TakeFailed()
		d.dump(reason)
	}
}

// dump writes the flight recorder to SPARCML_DUMP_DIR.
func (d *Watch) dump(reason string) {
	if d.dumpDir == "" {
		return
	}
	ops, started := d.rec.Snapshot()
	host, _ := os.Hostname()
	fd := &Dump{Version: DumpVersion, Rank: d.rank, Size: d.size, Host: host, PID: os.Getpid(),
		Time: time.Now(), Reason: reason, Started: started, Ops: ops, Peers: d.peers()}
	path, err := WriteDump(d.dumpDir, fd)
	if err != nil {
		d.log.Warnf(logging.Coll, "writing the flight recorder to SPARCML_DUMP_DIR: %v", err)
		return
	}
	d.log.Warnf(logging.Coll, "flight recorder (%s) written to %s", reason, path)
}

// peers is every rank's progress as the store has it, for a dump.
func (d *Watch) peers() []Peer {
	if d.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ps, err := bootstrap.QueryProgress(ctx, d.store)
	if err != nil {
		return nil
	}
	var out []Peer
	for _, p := range ps {
		if started, _, err := decodeProgressRecord(p.Value); p.Seen && err == nil {
			out = append(out, Peer{Rank: p.Rank, Started: started, SilentMS: p.Age.Milliseconds()})
		}
	}
	return out
}
