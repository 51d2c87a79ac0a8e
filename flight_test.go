package sparcml

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
)

// runOnAll runs f on every rank at once and returns each rank's error.
func runOnAll(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

func readDumpFile(t *testing.T, path string) *FlightDump {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := ReadFlightDump(f)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The recorder keeps the last SPARCML_FLIGHT_OPS operations with their
// kind, size, algorithm and outcome; a failed operation dumps them, and
// the dump reads back with the failure last.
func TestFlightRecorderDumpsOnFailure(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SPARCML_DUMP_DIR", dir)
	t.Setenv("SPARCML_FLIGHT_OPS", "4")
	comms, err := Local(2, WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx := context.Background()
	const n = 100
	for i := 0; i < 6; i++ {
		for r, err := range runOnAll(comms, func(c *Comm) error { return Allreduce(ctx, c, make([]float32, n), Sum) }) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	// Lengths that differ fail on both ranks.
	errs := runOnAll(comms, func(c *Comm) error { return Allreduce(ctx, c, make([]float32, n+c.Rank()), Sum) })
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: the mismatched allreduce succeeded", r)
		}
	}
	for r := range comms {
		d := readDumpFile(t, filepath.Join(dir, flightDumpName(r, os.Getpid())))
		if d.Rank != r || d.Size != 2 || d.Started != 7 || d.Reason != "failure" || len(d.Ops) != 4 {
			t.Fatalf("rank %d's dump: rank %d size %d started %d reason %q, %d ops", r, d.Rank, d.Size, d.Started, d.Reason, len(d.Ops))
		}
		for i, op := range d.Ops {
			if op.Seq != uint64(4+i) || op.Kind != "allreduce" {
				t.Errorf("rank %d op %d: %+v", r, i, op)
			}
			if i < 3 && (op.State != FlightDone || op.Count != n || op.DType != "float32" || op.Algo == "" || op.End.Before(op.Start)) {
				t.Errorf("rank %d op %d: %+v", r, i, op)
			}
		}
		last := d.Ops[3]
		if last.State != FlightFailed || !strings.Contains(last.Err, "mismatch") {
			t.Errorf("rank %d: last op %+v, want the mismatch", r, last)
		}
	}
}

// SIGUSR1 makes every communicator dump its recorder.
func TestFlightRecorderDumpsOnSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SPARCML_DUMP_DIR", dir)
	comms, err := Local(2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	runOnAll(comms, func(c *Comm) error { return c.Barrier(context.Background()) })
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for r := range comms {
		path := filepath.Join(dir, flightDumpName(r, os.Getpid()))
		end := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("rank %d wrote no dump after SIGUSR1", r)
			}
			time.Sleep(10 * time.Millisecond)
		}
		d := readDumpFile(t, path)
		if d.Reason != "SIGUSR1" || len(d.Ops) != 1 || d.Ops[0].Kind != "barrier" || d.Ops[0].State != FlightDone {
			t.Fatalf("rank %d's dump: %+v", r, d)
		}
	}
}

func progressOf(rank int, started uint64, age time.Duration) bootstrap.RankProgress {
	return bootstrap.RankProgress{Rank: rank, Value: encodeProgressRecord(started, 0), Age: age, Seen: true}
}

// lateRanks names silent ranks, ranks behind, and ranks without progress,
// never this rank, and says so when no rank is late.
func TestLateRanks(t *testing.T) {
	ps := []bootstrap.RankProgress{
		progressOf(0, 10, 100*time.Millisecond),
		progressOf(1, 7, 100*time.Millisecond),
		progressOf(2, 10, 9*time.Second),
		{Rank: 3},
		progressOf(4, 10, 0),
	}
	got := lateRanks(4, 10, ps)
	for _, want := range []string{"rank 2 silent for 9s", "rank 1 has not started seq 10 (at seq 7, 3 behind)", "no progress from ranks 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "rank 0") || strings.Contains(got, "rank 4") {
		t.Errorf("report %q names a rank that is not late", got)
	}
	if strings.Index(got, "rank 2") > strings.Index(got, "rank 1") {
		t.Errorf("report %q: silent ranks come first", got)
	}
	if got := lateRanks(0, 10, ps[:1]); !strings.Contains(got, "none") {
		t.Errorf("no late rank: %q", got)
	}
}

func sampleDumps() []*FlightDump {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	op := func(seq uint64, st FlightState, took time.Duration) FlightOp {
		o := FlightOp{Seq: seq, Kind: "allreduce", Count: 1024, DType: "float32", Algo: "ring", Peer: -1, State: st, Start: at.Add(-10 * time.Second)}
		if st != FlightStarted {
			o.End = o.Start.Add(took)
		}
		if st == FlightFailed {
			o.Peer, o.Err = 2, "context deadline exceeded"
		}
		return o
	}
	peers := []FlightPeer{{Rank: 0, Started: 8, SilentMS: 100}, {Rank: 1, Started: 7, SilentMS: 200}, {Rank: 2, Started: 7, SilentMS: 9000}}
	return []*FlightDump{
		{Version: 1, Rank: 0, Size: 3, Host: "a", PID: 10, Time: at, Reason: "timeout", Started: 8,
			Ops: []FlightOp{op(7, FlightDone, time.Millisecond), op(8, FlightFailed, 8*time.Second)}, Peers: peers},
		{Version: 1, Rank: 1, Size: 3, Host: "b", PID: 11, Time: at, Reason: "timeout", Started: 7,
			Ops: []FlightOp{op(7, FlightStarted, 0)}},
	}
}

// The merged view names the rank without a dump, the silent one, the one
// behind, and each rank's operations.
func TestWriteFlightView(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFlightView(&b, sampleDumps()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"job of 3 ranks, 2 dumps; the furthest rank started seq 8",
		"no dump from rank 2",
		"rank 2 (for 9s, at seq 7)",
		"behind: rank 1 (at seq 7, 1 behind)",
		"allreduce seq 7 (in flight)",
		"peer 2: context deadline exceeded",
		"waiting 10s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("view lacks %q:\n%s", want, out)
		}
	}
	bad := sampleDumps()
	bad[1].Size = 4
	if err := WriteFlightView(&b, bad); err == nil {
		t.Error("dumps of different job sizes were merged")
	}
}

// FuzzReadFlightDump: dumps are data files, possibly truncated or edited;
// any bytes must give a checked dump or an error, and a dump that decodes
// must encode and decode to itself and merge into a view.
func FuzzReadFlightDump(f *testing.F) {
	for _, d := range sampleDumps() {
		b, err := json.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"version":1,"rank":0,"size":1,"started":0,"ops":[]}`))
	f.Add([]byte(`{"version":1,"rank":5,"size":2}`))
	f.Add([]byte(`{"version":1,"rank":0,"size":1,"started":1,"ops":[{"seq":1,"state":"lost","peer":-1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ReadFlightDump(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ReadFlightDump(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("a decoded dump does not decode again: %v\n%s", err, b)
		}
		if len(again.Ops) != len(d.Ops) || again.Started != d.Started || again.Rank != d.Rank {
			t.Fatalf("round trip changed the dump: %+v, %+v", d, again)
		}
		if err := WriteFlightView(&bytes.Buffer{}, []*FlightDump{d}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeProgressRecord: records come from the store.
func FuzzDecodeProgressRecord(f *testing.F) {
	f.Add(encodeProgressRecord(9, 3))
	f.Add(encodeProgressRecord(3, 9)[:16])
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		started, oldest, err := decodeProgressRecord(data)
		if err != nil {
			return
		}
		if oldest > started || !bytes.Equal(encodeProgressRecord(started, oldest), data) {
			t.Fatalf("%x: started %d oldest %d", data, started, oldest)
		}
	})
}
