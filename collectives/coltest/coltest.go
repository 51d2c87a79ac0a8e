// Package coltest runs a function on every rank of an in-memory job, with a
// deadline, for collective tests.
package coltest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// Run runs fn on size ranks connected by in-memory transports and returns
// each rank's error. It fails the test if the ranks do not all return
// within timeout (a hang is a bug), and closes the transports afterwards.
func Run(t testing.TB, size int, timeout time.Duration, fn func(ctx context.Context, tr transport.Transport) error) []error {
	t.Helper()
	ts := transport.NewInMemory(size)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, size)
	done := make(chan int, size)
	for r := range ts {
		go func(r int) {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
				}
				done <- r
			}()
			errs[r] = fn(ctx, ts[r])
		}(r)
	}
	deadline := time.After(timeout + 5*time.Second)
	for range ts {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("ranks did not return within %v (hang)", timeout+5*time.Second)
		}
	}
	for _, tr := range ts {
		tr.Close()
	}
	return errs
}

// NewOp returns an Op for rank's transport with the given sequence number
// and descriptor, on communicator 1.
func NewOp(ctx context.Context, tr transport.Transport, seq uint64, desc transport.Desc) *collectives.Op {
	return &collectives.Op{Ctx: ctx, T: tr, Comm: 1, Seq: seq, Desc: desc, Pool: &collectives.Buffers{}}
}
