package collectives_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// Three ranks bring their local selections of a vector of 10; the global
// top-2 of the sums keeps index 4 (1+2+3 = 6) and index 0 (-5), and each
// rank gets back the entries it sent that were dropped.
func ExampleGlobalTopk() {
	inputs := [][2][]float32{
		{{0, 4, 7}, {-5, 1, 2}},
		{{4, 7}, {2, 1}},
		{{4, 9}, {3, 4}},
	}
	ts := transport.NewInMemory(3)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := &sparse.Vector[float32]{Dim: 10}
			for j, i := range inputs[r][0] {
				in.Indices, in.Values = append(in.Indices, uint32(i)), append(in.Values, inputs[r][1][j])
			}
			op := &collectives.Op{Ctx: context.Background(), T: tr, Comm: 1, Seq: 1, Pool: &collectives.Buffers{}}
			out, dropped := &sparse.Vector[float32]{}, &sparse.Vector[float32]{}
			var st collectives.GlobalTopkState
			stats, err := collectives.GlobalTopk(op, in, out, dropped, &st, collectives.GlobalTopkOptions{K: 2})
			if err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println("kept:", out.Indices, out.Values, "threshold:", stats.Threshold)
				fmt.Println("rank 0 dropped:", dropped.Indices, dropped.Values)
			}
		}()
	}
	wg.Wait()
	for _, tr := range ts {
		tr.Close()
	}
	// Output:
	// kept: [0 4] [-5 6] threshold: 5
	// rank 0 dropped: [7] [2]
}
