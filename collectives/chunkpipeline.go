package collectives

import (
	"context"
	"errors"
	"sync"

	"github.com/sparcml/sparcml/transport"
)

// errStageBefore stops a stage whose predecessor failed; the predecessor's
// error is the one returned.
var errStageBefore = errors.New("the stage before failed")

// runChunkPipeline runs stages over chunks 0..chunks-1 in order: stage j
// takes chunk i once stage j-1 has finished it, each stage in a goroutine
// of its own, so that successive chunks are in different stages at once.
// The stages of one chunk must use tags no other (stage, chunk) uses.
//
// The goroutines and the hand-offs between them go through t
// (transport.Go, transport.NewSignal): plain goroutines and requests on
// a network, and in the simulator goroutines it schedules in virtual time,
// which a Go channel between them would stall.
//
// The first failure is returned. A failed stage has failed the operation
// (Op.Fail), which fails the other stages' pending receives; the stages
// after it stop at the first chunk it did not finish.
func runChunkPipeline(ctx context.Context, t transport.Transport, chunks int, stages []func(int) error) error {
	var (
		mu    sync.Mutex
		first error
	)
	ready := make([][]*transport.Request, len(stages)) // ready[j][i]: stage j finished chunk i
	for j := range stages {
		ready[j] = make([]*transport.Request, chunks)
		for i := range chunks {
			ready[j][i] = transport.NewSignal(t)
		}
	}
	joins := make([]*transport.Request, len(stages))
	for j, stage := range stages {
		joins[j] = transport.Go(t, func() {
			for i := range chunks {
				var err error
				if j > 0 {
					err = ready[j-1][i].Wait(ctx) // errStageBefore, or ctx's end
				}
				if err == nil {
					err = stage(i)
				}
				if err != nil {
					mu.Lock()
					if first == nil && err != errStageBefore {
						first = err
					}
					mu.Unlock()
					for _, r := range ready[j][i:] {
						r.Complete(nil, errStageBefore)
					}
					return
				}
				ready[j][i].Complete(nil, nil)
			}
		})
	}
	for _, r := range joins {
		// A join request completes only when its stage returns, which
		// every stage does once its chunks are done or failed.
		_ = r.Wait(context.Background())
	}
	return first
}
