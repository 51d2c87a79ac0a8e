package sparcml

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/flight"
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

func readDumpFile(t *testing.T, path string) *flight.Dump {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := flight.ReadDump(f)
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
		d := readDumpFile(t, filepath.Join(dir, flight.DumpName(r, os.Getpid())))
		if d.Rank != r || d.Size != 2 || d.Started != 7 || d.Reason != "failure" || len(d.Ops) != 4 {
			t.Fatalf("rank %d's dump: rank %d size %d started %d reason %q, %d ops", r, d.Rank, d.Size, d.Started, d.Reason, len(d.Ops))
		}
		for i, op := range d.Ops {
			if op.Seq != uint64(4+i) || op.Kind != "allreduce" {
				t.Errorf("rank %d op %d: %+v", r, i, op)
			}
			if i < 3 && (op.State != flight.Done || op.Count != n || op.DType != "float32" || op.Algo == "" || op.End.Before(op.Start)) {
				t.Errorf("rank %d op %d: %+v", r, i, op)
			}
		}
		last := d.Ops[3]
		if last.State != flight.Failed || !strings.Contains(last.Err, "mismatch") {
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
		path := filepath.Join(dir, flight.DumpName(r, os.Getpid()))
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
		if d.Reason != "SIGUSR1" || len(d.Ops) != 1 || d.Ops[0].Kind != "barrier" || d.Ops[0].State != flight.Done {
			t.Fatalf("rank %d's dump: %+v", r, d)
		}
	}
}
