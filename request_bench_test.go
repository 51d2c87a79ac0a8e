package sparcml

import (
	"context"
	"runtime"
	"testing"
)

// BenchmarkStartWait: a small allreduce on 2 local ranks, each rank's
// caller locked to its OS thread as a caller from C or Python is, run
// blocking, started and waited for with a ctx that never ends (Wait then
// runs the collective itself when its goroutine has not begun), and
// started and waited for with a cancellable ctx (the collective always in
// its own goroutine: the hand-over and wake-up a waiter otherwise saves).
//
//	go test -run XXX -bench StartWait .
func BenchmarkStartWait(b *testing.B) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *Comm, data []float32) error
	}{
		{"blocking", func(ctx context.Context, c *Comm, data []float32) error {
			return Allreduce(ctx, c, data, Sum)
		}},
		{"start-wait", func(ctx context.Context, c *Comm, data []float32) error {
			return StartAllreduce(ctx, c, data, Sum).Wait(ctx)
		}},
		{"start-wait-cancellable", func(ctx context.Context, c *Comm, data []float32) error {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			return StartAllreduce(ctx, c, data, Sum).Wait(wctx)
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			comms, err := Local(2)
			if err != nil {
				b.Fatal(err)
			}
			defer closeAll(comms)
			errs := make(chan error, len(comms))
			b.ResetTimer()
			for _, c := range comms {
				go func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					data := make([]float32, 8)
					for range b.N {
						if err := tc.call(context.Background(), c, data); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for range comms {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
