package compress_test

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/sparse"
)

// Exact top-k: the indices of the 3 largest magnitudes, in index order.
// Zeros are never selected, NaN ranks above everything, ties go to the
// lower index.
func ExampleSelector_TopK() {
	s, _ := compress.NewSelector[float32](compress.Config{})
	x := []float32{0.5, -4, 0, 2, 2, float32(math.NaN()), -1}
	idx, r := s.TopK(nil, x, 3)
	fmt.Println(idx, r.Threshold)
	// Output: [1 3 5] 2
}

// Error feedback: what is not sent stays in the residual and is added to
// the next gradient, so small entries are sent once they have grown (at
// step 1 the tie between entries 0 and 2 goes to the lower index).
func ExampleSparsifier() {
	sp, _ := compress.NewSparsifier[float32](4, compress.Config{Density: 0.25})
	var out sparse.Vector[float32]
	for step := range 3 {
		_, _ = sp.Step([]float32{3, 1, -1.5, 0.5}, &out)
		fmt.Println("step", step, "sent", out.Indices, out.Values, "residual", sp.Residual())
	}
	// Output:
	// step 0 sent [0] [3] residual [0 1 -1.5 0.5]
	// step 1 sent [0] [3] residual [0 2 -3 1]
	// step 2 sent [2] [-4.5] residual [3 3 0 1.5]
}
