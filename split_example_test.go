package sparcml_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml"
)

// Split four ranks into two groups, evens and odds, each a communicator
// of its own whose allreduce sums over its members only.
func ExampleComm_Split() {
	comms, _ := sparcml.Local(4)
	var wg sync.WaitGroup
	sums := make([][]float64, len(comms))
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			ctx := context.Background()
			group, err := c.Split(ctx, r%2, r) // color: parity; key: keep the order
			if err != nil {
				panic(err)
			}
			defer group.Close()
			v := []float64{float64(r)}
			if err := sparcml.Allreduce(ctx, group, v, sparcml.Sum); err != nil {
				panic(err)
			}
			sums[r] = v
		}(r, c)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	fmt.Println("evens:", sums[0], sums[2], "odds:", sums[1], sums[3])
	// Output: evens: [2] [2] odds: [4] [4]
}
