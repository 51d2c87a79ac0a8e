package model

import "sync"

// Matrix products of the layers, on row-major float32 matrices. Each
// kernel accumulates into C (C += op(A)·op(B)) with a 2x4 register block:
// two rows of op(A), packed side by side so that the inner loop reads them
// as one stream, against four columns of op(B), eight running sums that
// stay in registers for the whole inner dimension. That is the largest
// block the amd64 register file holds without spilling (16 registers:
// 8 sums, 4 values of B, 2 of A); larger blocks measured slower in
// BenchmarkGemm. The work is split by rows of C over Workers goroutines.

// Workers runs matrix products on up to n goroutines (n >= 1). Its zero
// value runs everything on the calling goroutine.
type Workers struct {
	n     int
	packs [][]float32 // one packing buffer per goroutine
}

// NewWorkers returns a Workers running products on n goroutines.
func NewWorkers(n int) *Workers {
	if n < 1 {
		n = 1
	}
	return &Workers{n: n, packs: make([][]float32, n)}
}

// N is the number of goroutines products run on.
func (w *Workers) N() int {
	if w == nil || w.n < 1 {
		return 1
	}
	return w.n
}

// split runs fn over [0, m) cut into at most N() even row ranges (even
// boundaries, so every range but the last starts a 2-row block), each with
// its own packing buffer of at least 2*k values.
func (w *Workers) split(m, k int, fn func(lo, hi int, pack []float32)) {
	n := w.N()
	if w == nil || w.packs == nil {
		fn(0, m, make([]float32, 2*k))
		return
	}
	if n > (m+1)/2 {
		n = max(1, (m+1)/2)
	}
	for i := 0; i < n; i++ {
		if cap(w.packs[i]) < 2*k {
			w.packs[i] = make([]float32, 2*k)
		}
	}
	if n == 1 {
		fn(0, m, w.packs[0][:2*k])
		return
	}
	rows := ((m+1)/2 + n - 1) / n * 2
	var wg sync.WaitGroup
	for lo := 0; lo < m; lo += rows {
		hi := min(lo+rows, m)
		pack := w.packs[lo/rows][:2*k]
		if hi == m {
			fn(lo, hi, pack) // the caller's share
			break
		}
		wg.Add(1)
		go func() { defer wg.Done(); fn(lo, hi, pack) }()
	}
	wg.Wait()
}

// MulNN computes C[m×n] += A[m×k]·B[k×n].
func (w *Workers) MulNN(m, n, k int, a, b, c []float32) {
	checkLen(a, m*k, "A")
	checkLen(b, k*n, "B")
	checkLen(c, m*n, "C")
	w.split(m, k, func(lo, hi int, pack []float32) {
		for i := lo; i < hi; i += 2 {
			two := i+1 < hi
			packRowPair(a, k, i, two, pack)
			panelNN(n, k, pack, b, c, i, two)
		}
	})
}

// MulTN computes C[m×n] += Aᵀ·B where A is [k×m] and B [k×n]: the
// weight gradient Xᵀ·dY of a layer.
func (w *Workers) MulTN(m, n, k int, a, b, c []float32) {
	checkLen(a, k*m, "A")
	checkLen(b, k*n, "B")
	checkLen(c, m*n, "C")
	w.split(m, k, func(lo, hi int, pack []float32) {
		for i := lo; i < hi; i += 2 {
			two := i+1 < hi
			if two {
				for p := range k {
					pack[2*p], pack[2*p+1] = a[p*m+i], a[p*m+i+1]
				}
			} else {
				for p := range k {
					pack[2*p], pack[2*p+1] = a[p*m+i], a[p*m+i]
				}
			}
			panelNN(n, k, pack, b, c, i, two)
		}
	})
}

// MulNT computes C[m×n] += A·Bᵀ where A is [m×k] and B [n×k]: the input
// gradient dY·Wᵀ of a layer.
func (w *Workers) MulNT(m, n, k int, a, b, c []float32) {
	checkLen(a, m*k, "A")
	checkLen(b, n*k, "B")
	checkLen(c, m*n, "C")
	w.split(m, k, func(lo, hi int, pack []float32) {
		for i := lo; i < hi; i += 2 {
			two := i+1 < hi
			packRowPair(a, k, i, two, pack)
			panelNT(n, k, pack, b, c, i, two)
		}
	})
}

// packRowPair interleaves rows i and i+1 (row i twice when !two) of the
// row-major matrix a, k columns wide, into pack.
func packRowPair(a []float32, k, i int, two bool, pack []float32) {
	r0 := a[i*k : i*k+k]
	r1 := r0
	if two {
		r1 = a[(i+1)*k : (i+1)*k+k]
	}
	for p := range k {
		pack[2*p], pack[2*p+1] = r0[p], r1[p]
	}
}

// panelNN adds rows i and i+1 (only i when !two) of pack·B to C; pack
// holds the two rows of op(A) interleaved.
func panelNN(n, k int, pack, b, c []float32, i int, two bool) {
	pack = pack[:2*k]
	j := 0
	for ; j+4 <= n; j += 4 {
		var s00, s01, s02, s03, s10, s11, s12, s13 float32
		off := j
		for p := 0; p < k; p++ {
			bb := b[off : off+4 : off+4]
			x0, x1 := pack[2*p], pack[2*p+1]
			b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
			s00 += x0 * b0
			s01 += x0 * b1
			s02 += x0 * b2
			s03 += x0 * b3
			s10 += x1 * b0
			s11 += x1 * b1
			s12 += x1 * b2
			s13 += x1 * b3
			off += n
		}
		r := c[i*n+j : i*n+j+4 : i*n+j+4]
		r[0] += s00
		r[1] += s01
		r[2] += s02
		r[3] += s03
		if two {
			r = c[(i+1)*n+j : (i+1)*n+j+4 : (i+1)*n+j+4]
			r[0] += s10
			r[1] += s11
			r[2] += s12
			r[3] += s13
		}
	}
	for ; j < n; j++ {
		var s0, s1 float32
		for p := 0; p < k; p++ {
			x := b[p*n+j]
			s0 += pack[2*p] * x
			s1 += pack[2*p+1] * x
		}
		c[i*n+j] += s0
		if two {
			c[(i+1)*n+j] += s1
		}
	}
}

// panelNT adds rows i and i+1 (only i when !two) of pack·Bᵀ to C, B being
// [n×k]: each column of Bᵀ is a contiguous row of B.
func panelNT(n, k int, pack, b, c []float32, i int, two bool) {
	pack = pack[:2*k]
	j := 0
	for ; j+4 <= n; j += 4 {
		var s00, s01, s02, s03, s10, s11, s12, s13 float32
		q0 := b[j*k : j*k+k]
		q1 := b[(j+1)*k : (j+1)*k+k]
		q2 := b[(j+2)*k : (j+2)*k+k]
		q3 := b[(j+3)*k : (j+3)*k+k]
		for p := 0; p < k; p++ {
			x0, x1 := pack[2*p], pack[2*p+1]
			b0, b1, b2, b3 := q0[p], q1[p], q2[p], q3[p]
			s00 += x0 * b0
			s01 += x0 * b1
			s02 += x0 * b2
			s03 += x0 * b3
			s10 += x1 * b0
			s11 += x1 * b1
			s12 += x1 * b2
			s13 += x1 * b3
		}
		r := c[i*n+j : i*n+j+4 : i*n+j+4]
		r[0] += s00
		r[1] += s01
		r[2] += s02
		r[3] += s03
		if two {
			r = c[(i+1)*n+j : (i+1)*n+j+4 : (i+1)*n+j+4]
			r[0] += s10
			r[1] += s11
			r[2] += s12
			r[3] += s13
		}
	}
	for ; j < n; j++ {
		q := b[j*k : j*k+k]
		var s0, s1 float32
		for p := 0; p < k; p++ {
			s0 += pack[2*p] * q[p]
			s1 += pack[2*p+1] * q[p]
		}
		c[i*n+j] += s0
		if two {
			c[(i+1)*n+j] += s1
		}
	}
}

func checkLen(x []float32, want int, name string) {
	if len(x) < want {
		panic("model: matrix " + name + " too short")
	}
}
