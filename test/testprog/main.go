// Command testprog is the rank program of the multi-process tests in
// test/: started by `sparcml run` or by the tests themselves, it joins the
// job from the environment and runs one scenario. Results are checked
// against references computed locally from every rank's seeded input.
//
// Exit status: 0 success, 1 a wrong result, 3 a collective returned an
// error (printed as "ERR: ..." on stderr), 4 Init failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sparcml/sparcml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testprog SCENARIO [SEED]")
		os.Exit(2)
	}
	seed := uint64(1)
	if len(os.Args) > 2 {
		s, err := strconv.ParseUint(os.Args[2], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad seed:", err)
			os.Exit(2)
		}
		seed = s
	}
	ctx := context.Background()
	comm, err := sparcml.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "INIT: "+err.Error())
		os.Exit(4)
	}
	defer comm.Close()
	code := run(ctx, comm, os.Args[1], seed)
	comm.Close()
	os.Exit(code)
}

func run(ctx context.Context, c *sparcml.Comm, scenario string, seed uint64) int {
	var err error
	switch scenario {
	case "collectives":
		err = allCollectives(ctx, c, seed)
		if err == nil {
			err = allSparse(ctx, c, seed)
		}
	case "dense":
		err = allCollectives(ctx, c, seed)
	case "sparse":
		err = allSparse(ctx, c, seed)
	case "sparse-bad-input":
		err = expectErrorThenRecover(ctx, c, func() error {
			in := &sparcml.SparseVector[float32]{Dim: 100, Indices: []uint32{5, 3}, Values: []float32{1, 2}}
			if c.Rank() != 1 {
				in = &sparcml.SparseVector[float32]{Dim: 100, Indices: []uint32{3, 5}, Values: []float32{1, 2}}
			}
			_, err := sparcml.SparseAllreduce(ctx, c, in, &sparcml.SparseVector[float32]{}, sparcml.Sum)
			return err
		})
	case "sparse-dim-mismatch":
		err = expectErrorThenRecover(ctx, c, func() error {
			in := &sparcml.SparseVector[float64]{Dim: 100 + c.Rank()%2}
			_, err := sparcml.SparseAllreduce(ctx, c, in, &sparcml.SparseVector[float64]{}, sparcml.Avg)
			return err
		})
	case "loop":
		err = loop(ctx, c)
	case "shrink":
		err = survive(ctx, c, seed)
	case "mixed":
		err = mixedLoop(ctx, c, seed)
	case "mismatch-len":
		n := 100
		if c.Rank() == c.Size()-1 {
			n = 101
		}
		err = expectErrorThenRecover(ctx, c, func() error {
			return sparcml.Allreduce(ctx, c, make([]float32, n), sparcml.Sum)
		})
	case "mismatch-op":
		err = expectErrorThenRecover(ctx, c, func() error {
			buf := make([]float32, 64)
			if c.Rank() == 0 {
				return sparcml.Broadcast(ctx, c, buf, 0)
			}
			return sparcml.Allreduce(ctx, c, buf, sparcml.Sum)
		})
	case "nil-buffer":
		err = expectErrorThenRecover(ctx, c, func() error {
			var buf []float64
			if c.Rank() != 0 {
				buf = make([]float64, 10)
			}
			return sparcml.Allreduce(ctx, c, buf, sparcml.Sum)
		})
	case "bad-root":
		err = expectErrorThenRecover(ctx, c, func() error {
			return sparcml.Broadcast(ctx, c, make([]float32, 8), c.Size())
		})
	case "empty":
		err = sparcml.Allreduce(ctx, c, []float32{}, sparcml.Sum)
		if err == nil {
			err = sparcml.Allreduce(ctx, c, []float64(nil), sparcml.Max)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown scenario", scenario)
		return 2
	}
	var wrong *wrongResult
	switch {
	case err == nil:
		fmt.Printf("rank %d: %s ok\n", c.Rank(), scenario)
		return 0
	case errors.As(err, &wrong):
		fmt.Fprintln(os.Stderr, "WRONG: "+err.Error())
		return 1
	default:
		fmt.Fprintln(os.Stderr, "ERR: "+err.Error())
		return 3
	}
}

// expectErrorThenRecover runs a collective that must fail on every rank,
// prints its error, then checks that the communicator still works: a
// correct allreduce after the failed one.
func expectErrorThenRecover(ctx context.Context, c *sparcml.Comm, bad func() error) error {
	err := bad()
	if err == nil {
		return &wrongResult{"the bad call succeeded on rank " + strconv.Itoa(c.Rank())}
	}
	fmt.Fprintln(os.Stderr, "EXPECTED: "+err.Error())
	buf := []float64{float64(c.Rank() + 1)}
	if err := sparcml.Allreduce(ctx, c, buf, sparcml.Sum); err != nil {
		return fmt.Errorf("allreduce after the failed call: %w", err)
	}
	p := c.Size()
	if buf[0] != float64(p*(p+1)/2) {
		return &wrongResult{fmt.Sprintf("allreduce after the failed call gave %v", buf[0])}
	}
	return nil
}

// loop runs allreduces until one fails, printing progress; used to kill a
// rank in the middle of an operation.
func loop(ctx context.Context, c *sparcml.Comm) error {
	buf := make([]float32, 1<<20)
	for i := 0; ; i++ {
		if err := sparcml.Allreduce(ctx, c, buf, sparcml.Sum); err != nil {
			return err
		}
		if i%5 == 0 {
			fmt.Printf("iter %d\n", i)
		}
		if i > 1_000_000 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

type wrongResult struct{ msg string }

func (w *wrongResult) Error() string { return w.msg }
