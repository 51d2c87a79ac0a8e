package startup

import "testing"

// TestMedianByColumn: each figure is the median of the ranks', so one
// rank's outlier (a starved window) moves none of them.
func TestMedianByColumn(t *testing.T) {
	rows := []float64{
		1e-9, 5e-10, // rank 0
		3e-8, 4e-10, // rank 1: its dense window starved
		2e-9, 6e-10, // rank 2
	}
	got := medianByColumn(rows, 2)
	if got[0] != 2e-9 || got[1] != 5e-10 {
		t.Fatalf("medians %v, want [2e-9 5e-10]", got)
	}
	if got := medianByColumn([]float64{4, 1}, 1); got[0] != 4 {
		t.Fatalf("median of two: %v, want the upper one", got)
	}
}
