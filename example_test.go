package sparcml_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml"
)

// A job of four ranks inside one process (in a real job each rank is its
// own process and calls sparcml.Init instead of sparcml.Local).
func ExampleAllreduce() {
	comms, _ := sparcml.Local(4)
	var wg sync.WaitGroup
	results := make([][]float32, len(comms))
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			grad := []float32{float32(r), 1, 2}
			if err := sparcml.Allreduce(context.Background(), c, grad, sparcml.Sum); err != nil {
				panic(err)
			}
			results[r] = grad
		}(r, c)
	}
	wg.Wait()
	fmt.Println(results[0], results[3])
	// Output: [6 4 8] [6 4 8]
}

// Several operations in flight on one communicator: start them in the
// same order on every rank, wait in any order.
func ExampleStartAllreduce() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			ctx := context.Background()
			a := []float64{1, 2}
			b := []float64{10}
			reqA := sparcml.StartAllreduce(ctx, c, a, sparcml.Sum)
			reqB := sparcml.StartAllreduce(ctx, c, b, sparcml.Max)
			// ... compute while the operations progress ...
			if err := reqB.Wait(ctx); err != nil {
				panic(err)
			}
			if err := reqA.Wait(ctx); err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println(a, b)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: [2 4] [10]
}

// Allgatherv: every rank contributes a different number of elements.
func ExampleAllgatherv() {
	comms, _ := sparcml.Local(3)
	counts := []int{1, 0, 2}
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			in := make([]float32, counts[r])
			for i := range in {
				in[i] = float32(10*r + i)
			}
			out := make([]float32, 3)
			if err := sparcml.Allgatherv(context.Background(), c, in, out, counts); err != nil {
				panic(err)
			}
			if r == 1 {
				fmt.Println(out)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: [0 20 21]
}

// A window of point-to-point messages in flight, completed with one
// WaitAll, as a bandwidth test or a pipeline stage does.
func ExampleWaitAll() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			ctx := context.Background()
			window := make([]*sparcml.Request, 4)
			bufs := make([][]float32, len(window))
			for i := range window {
				bufs[i] = make([]float32, 2)
				if r == 0 {
					bufs[i][0], bufs[i][1] = float32(i), float32(10*i)
					window[i] = sparcml.StartSend(ctx, c, bufs[i], 1)
				} else {
					window[i] = sparcml.StartRecv(ctx, c, bufs[i], 0)
				}
			}
			if err := sparcml.WaitAll(ctx, window...); err != nil {
				panic(err)
			}
			if r == 1 {
				fmt.Println(bufs)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: [[0 0] [1 10] [2 20] [3 30]]
}
