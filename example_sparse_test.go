package sparcml_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml"
)

// Averaging sparse gradients over three ranks: each rank brings its own
// nonzeros; the result holds the sum divided by the number of ranks, in
// whichever form is smaller, and the stats name the algorithm that ran.
func ExampleSparseAllreduce() {
	comms, _ := sparcml.Local(3)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			// Rank r touched coordinates r and 7 of an 8-dimensional gradient.
			in, err := sparcml.NewSparseVector(8, []uint32{uint32(r), 7}, []float32{3, 6})
			if err != nil {
				panic(err)
			}
			out := &sparcml.SparseVector[float32]{}
			st, err := sparcml.SparseAllreduce(context.Background(), c, in, out, sparcml.Avg,
				sparcml.WithAlgo(sparcml.AlgoSparseAllgather))
			if err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println(out.ToDense(nil), st.Algo)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: [1 1 1 0 0 0 0 6] allgather
}

// SparseAllgather gives every rank every rank's vector; out holds one
// vector per rank.
func ExampleSparseAllgather() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			in := sparcml.SparseVectorFromDense([]float64{float64(r + 1), 0, 0, 0, 0, 0, 0, 5})
			out := make([]*sparcml.SparseVector[float64], c.Size())
			if err := sparcml.SparseAllgather(context.Background(), c, in, out); err != nil {
				panic(err)
			}
			if r == 1 {
				fmt.Println(out[0].Indices, out[0].Values, out[1].Indices, out[1].Values)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: [0 7] [1 5] [0 7] [2 5]
}

func ExampleNewSparseVector() {
	v, err := sparcml.NewSparseVector(5, []uint32{1, 3}, []float32{2.5, -1})
	fmt.Println(v.ToDense(nil), v.NNZ(), err)
	_, err = sparcml.NewSparseVector(5, []uint32{3, 1}, []float32{2.5, -1})
	fmt.Println(err != nil)
	// Output:
	// [0 2.5 0 -1 0] 2 <nil>
	// true
}

// Entries gathered in any order, with repeats (as top-k selection over
// several buckets produces), are sorted and summed.
func ExampleSparseVectorFromUnsorted() {
	v, err := sparcml.SparseVectorFromUnsorted(6, []uint32{4, 0, 4}, []float64{1, 2, 0.5})
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Indices, v.Values)
	// Output: [0 4] [2 1.5]
}

func ExampleSparseVectorFromDense() {
	v := sparcml.SparseVectorFromDense([]float32{0, 0, 7, 0, 1})
	fmt.Println(v.Dim, v.Indices, v.Values)
	// Output: 5 [2 4] [7 1]
}

// A dense gradient handed to a sparse collective as it is, without a copy.
func ExampleDenseSparseVector() {
	grad := []float32{0.5, 0, 2}
	v := sparcml.DenseSparseVector(grad)
	fmt.Println(v.Dense, v.NNZ(), v.ToDense(nil))
	// Output: true 3 [0.5 0 2]
}

// Normalize repairs a vector built by hand from unsorted entries; ToDense
// writes its values into a reused buffer.
func ExampleSparseVector() {
	v := &sparcml.SparseVector[float32]{Dim: 4, Indices: []uint32{3, 1, 3}, Values: []float32{1, 2, 4}}
	fmt.Println(v.Validate() != nil)
	if err := v.Normalize(); err != nil {
		panic(err)
	}
	buf := make([]float32, 0, 4)
	buf = v.ToDense(buf)
	fmt.Println(v.Indices, v.Values, buf)
	// Output:
	// true
	// [1 3] [2 5] [0 2 0 5]
}

// Forcing packed indices: the sum is exactly the one raw indices give
// (the packing is lossless), and the stats say the rank sent them packed.
// With the default, IndexAuto, the calibrated model packs them only where
// the network is slow enough for it to pay.
func ExampleWithIndices() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			idx, vals := []uint32{}, []float32{}
			for i := r; i < 1000; i += 100 {
				idx, vals = append(idx, uint32(i)), append(vals, 1)
			}
			in, err := sparcml.NewSparseVector(1000, idx, vals)
			if err != nil {
				panic(err)
			}
			out := &sparcml.SparseVector[float32]{}
			st, err := sparcml.SparseAllreduce(context.Background(), c, in, out, sparcml.Sum,
				sparcml.WithAlgo(sparcml.AlgoSparseAllgather), sparcml.WithIndices(sparcml.IndexPacked))
			if err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println(out.NNZ(), out.Indices[:4], st.PackedIndices)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: 20 [0 1 100 101] true
}

// A training loop names each gradient tensor with WithTensor: its calls
// reuse the decision of a counts exchange, and WithTensor(id, n) makes
// this tensor exchange again every n calls (here 2: calls 0 and 2 agree,
// calls 1 and 3 reuse their plan).
func ExampleWithTensor() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			for step := range 4 {
				in, err := sparcml.NewSparseVector(1000, []uint32{uint32(r), uint32(100 + step)}, []float32{1, 1})
				if err != nil {
					panic(err)
				}
				out := &sparcml.SparseVector[float32]{}
				st, err := sparcml.SparseAllreduce(context.Background(), c, in, out, sparcml.Sum,
					sparcml.WithTensor(1, 2))
				if err != nil {
					panic(err)
				}
				if r == 0 {
					fmt.Println(step, "reused:", st.Reused, "sum at", 100+step, "=", out.ToDense(nil)[100+step])
				}
			}
		}(r, c)
	}
	wg.Wait()
	// Output:
	// 0 reused: false sum at 100 = 2
	// 1 reused: true sum at 101 = 2
	// 2 reused: false sum at 102 = 2
	// 3 reused: true sum at 103 = 2
}

// Summing embedding gradients row by row: each rank touched a few rows of
// a 1000 x 4 table, and every row travels as one index and its 4 values.
// The result holds the touched rows, their sums in order.
func ExampleNewRowSparseVector() {
	comms, _ := sparcml.Local(2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *sparcml.Comm) {
			defer wg.Done()
			// Rank r touched row 10*r and row 999.
			rows := []uint32{uint32(10 * r), 999}
			vals := []float32{1, 2, 3, 4, 1, 1, 1, 1}
			in, err := sparcml.NewRowSparseVector(1000, 4, rows, vals)
			if err != nil {
				panic(err)
			}
			out := &sparcml.SparseVector[float32]{}
			if _, err := sparcml.SparseAllreduce(context.Background(), c, in, out, sparcml.Sum); err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println(out.Block, out.Indices, out.Values)
			}
		}(r, c)
	}
	wg.Wait()
	// Output: 4 [0 10 999] [1 2 3 4 1 2 3 4 2 2 2 2]
}
