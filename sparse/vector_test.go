package sparse

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomSupport returns nnz distinct sorted indices below dim.
func randomSupport(rng *rand.Rand, dim, nnz int) []uint32 {
	if nnz > dim {
		nnz = dim
	}
	if 2*nnz > dim {
		var idx []uint32
		for i := 0; i < dim; i++ {
			// Select exactly nnz of dim by sequential sampling.
			if rng.IntN(dim-i) < nnz-len(idx) {
				idx = append(idx, uint32(i))
			}
		}
		return idx
	}
	seen := make(map[uint32]bool, nnz)
	idx := make([]uint32, 0, nnz)
	for len(idx) < nnz {
		x := uint32(rng.Int64N(int64(dim)))
		if !seen[x] {
			seen[x] = true
			idx = append(idx, x)
		}
	}
	slices.Sort(idx)
	return idx
}

// randomVector returns a sparse vector with small integer values, so sums
// are exact in both float types and can be compared bit for bit.
func randomVector[T Float](rng *rand.Rand, dim, nnz int) *Vector[T] {
	idx := randomSupport(rng, dim, nnz)
	vals := make([]T, len(idx))
	for i := range vals {
		vals[i] = T(rng.IntN(17) - 8)
	}
	return &Vector[T]{Dim: dim, Indices: idx, Values: vals}
}

func denseOf[T Float](v *Vector[T]) []T { return v.ToDense(nil) }

func TestValidateNamesFirstBadPosition(t *testing.T) {
	cases := []struct {
		name string
		v    Vector[float32]
		want string
	}{
		{"unsorted", Vector[float32]{Dim: 10, Indices: []uint32{1, 5, 3}, Values: []float32{1, 2, 3}}, "index 3 at position 2 is not sorted"},
		{"duplicate", Vector[float32]{Dim: 10, Indices: []uint32{1, 1}, Values: []float32{1, 2}}, "index 1 at position 1 is a duplicate"},
		{"range", Vector[float32]{Dim: 4, Indices: []uint32{0, 4}, Values: []float32{1, 2}}, "index 4 at position 1 is out of range for dimension 4"},
		{"lengths", Vector[float32]{Dim: 4, Indices: []uint32{0}, Values: nil}, "1 indices but 0 values"},
		{"dense length", Vector[float32]{Dim: 4, Dense: true, Values: []float32{1}}, "dense vector has 1 values for dimension 4"},
		{"negative dim", Vector[float32]{Dim: -1}, "dimension -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.v.Validate()
			isTrue(t, err != nil)
			isTrue(t, errors.Is(err, ErrInvalid))
			errHas(t, err, c.want)
		})
	}
	ok := Vector[float64]{Dim: 1 << 32, Indices: []uint32{0, 1<<32 - 1}, Values: []float64{1, 2}}
	noErr(t, ok.Validate())
}

func TestNormalizeSortsAndSums(t *testing.T) {
	v := &Vector[float64]{Dim: 10, Indices: []uint32{7, 2, 7, 0, 2}, Values: []float64{1, 2, 3, 4, 5}}
	noErr(t, v.Normalize())
	equal(t, []uint32{0, 2, 7}, v.Indices)
	equal(t, []float64{4, 7, 4}, v.Values)
	noErr(t, v.Validate())

	u, err := FromUnsorted(5, []uint32{4, 1, 4}, []float64{1, 2, 3})
	noErr(t, err)
	equal(t, []uint32{1, 4}, u.Indices)
	equal(t, []float64{2, 4}, u.Values)
	_, err = NewSparse(5, []uint32{4, 1}, []float64{1, 2})
	errHas(t, err, "index 1 at position 1 is not sorted")

	bad := &Vector[float64]{Dim: 3, Indices: []uint32{2, 3}, Values: []float64{1, 1}}
	errHas(t, bad.Normalize(), "index 3 at position 1 is out of range")
	equal(t, []uint32{2, 3}, bad.Indices, "a failed Normalize leaves the vector unchanged")
}

func TestNormalizeMatchesDenseReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		dim := 1 + rng.IntN(50)
		n := rng.IntN(80)
		v := &Vector[float32]{Dim: dim}
		want := make([]float32, dim)
		for range n {
			i := rng.IntN(dim)
			x := float32(rng.IntN(9) - 4)
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, x)
			want[i] += x
		}
		noErr(t, v.Normalize())
		noErr(t, v.Validate())
		equal(t, want, denseOf(v))
	}
}

func TestDensifyAndCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		dim := 1 + rng.IntN(40)
		v := randomVector[float64](rng, dim, rng.IntN(dim+1))
		want := denseOf(v)
		// In place (enough capacity) and reallocating.
		w := &Vector[float64]{Dim: v.Dim, Indices: slices.Clone(v.Indices), Values: append(make([]float64, 0, dim), v.Values...)}
		w.Densify()
		isTrue(t, w.Dense)
		equal(t, want, w.Values)
		v.Densify()
		equal(t, want, v.Values)

		v.Compact()
		equal(t, want, denseOf(v))
		nz := 0
		for _, x := range want {
			if x != 0 {
				nz++
			}
		}
		equal(t, PreferDense(nz, dim, 8), v.Dense)
		noErr(t, v.Validate())
	}
}

func TestPreferDenseRule(t *testing.T) {
	// 32-bit values: the switch is at half the dimension.
	isTrue(t, !PreferDense(49, 100, 4))
	isTrue(t, PreferDense(50, 100, 4))
	// 64-bit values: at two thirds.
	isTrue(t, !PreferDense(66, 100, 8))
	isTrue(t, PreferDense(67, 100, 8))
	isTrue(t, PreferDense(0, 0, 4))
	// No overflow near the largest dimension.
	isTrue(t, !PreferDense(1<<31-1, MaxDim, 4))
	isTrue(t, PreferDense(1<<31, MaxDim, 4))
}

func TestAddMatchesDenseReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var dst Vector[float32] // reused across iterations on purpose
	for it := range 2000 {
		dim := 1 + rng.IntN(64)
		na, nb := rng.IntN(dim+1), rng.IntN(dim+1)
		if it%3 == 0 { // few entries in a large dimension: the merge path
			dim, na, nb = 4096, rng.IntN(100), rng.IntN(100)
		}
		a := randomVector[float32](rng, dim, na)
		b := randomVector[float32](rng, dim, nb)
		if rng.IntN(4) == 0 {
			a.Densify()
		}
		if rng.IntN(4) == 0 {
			b.Densify()
		}
		want := denseOf(a)
		for i, x := range denseOf(b) {
			want[i] += x
		}
		noErr(t, Add(&dst, a, b))
		noErr(t, dst.Validate())
		equal(t, want, denseOf(&dst))
		// The form follows the rule on the exact union.
		union := len(unionOf(a, b))
		equal(t, a.Dense || b.Dense || PreferDense(union, dim, 4), dst.Dense)
		if !dst.Dense {
			equal(t, union, len(dst.Indices))
		}
	}
}

func unionOf[T Float](vs ...*Vector[T]) []uint32 {
	var all []uint32
	for _, v := range vs {
		if v.Dense {
			for i := 0; i < v.Dim; i++ {
				all = append(all, uint32(i))
			}
			continue
		}
		all = append(all, v.Indices...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

func TestAddRejectsMisuse(t *testing.T) {
	a, b := Zero[float64](3), Zero[float64](4)
	errIs(t, Add(Zero[float64](3), a, b), ErrInvalid)
	errIs(t, Add(a, a, Zero[float64](3)), ErrInvalid)
	errIs(t, a.AddTo(make([]float64, 2)), ErrInvalid)
	errIs(t, SumAll(a, []*Vector[float64]{b, a}), ErrInvalid)
	errIs(t, SumAll(a, nil), ErrInvalid)
}

func TestSumAllMatchesDenseReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var dst Vector[float64]
	for it := range 200 {
		dim := 1 + rng.IntN(200)
		few := it%3 == 0 // below the accumulator's threshold: the k-way merge
		if few {
			dim = 1 << 12
		}
		parts := make([]*Vector[float64], 1+rng.IntN(9))
		want := make([]float64, dim)
		for i := range parts {
			nnz := rng.IntN(dim + 1)
			if rng.IntN(2) == 0 {
				nnz = rng.IntN(dim/10 + 1)
			}
			if few {
				nnz = rng.IntN(25)
			}
			parts[i] = randomVector[float64](rng, dim, nnz)
			if !few && rng.IntN(10) == 0 {
				parts[i].Densify()
			}
			for j, x := range denseOf(parts[i]) {
				want[j] += x
			}
		}
		noErr(t, SumAll(&dst, parts))
		noErr(t, dst.Validate())
		equal(t, want, denseOf(&dst))
		if !dst.Dense {
			equal(t, unionOf(parts...), dst.Indices)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var got Vector[float64]
	var buf []byte
	for range 500 {
		dim := rng.IntN(100)
		v := randomVector[float64](rng, dim, rng.IntN(dim+1))
		if rng.IntN(5) == 0 {
			v.Densify()
		}
		buf = encoded(v, buf[:0])
		n, err := EncodedLen(buf)
		noErr(t, err)
		equal(t, len(buf), n)
		equal(t, CompactSize(v.NNZ(), dim, 8), len(buf), "encoded in the smaller form")
		noErr(t, got.Decode(buf))
		equal(t, denseOf(v), denseOf(&got))
		equal(t, v.Dense || PreferDense(v.NNZ(), dim, 8), got.Dense)
	}
}

func TestEncodeRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var got Vector[float32]
	for range 500 {
		dim := 1 + rng.IntN(100)
		v := randomVector[float32](rng, dim, rng.IntN(dim+1))
		if rng.IntN(5) == 0 {
			v.Densify()
		}
		lo := rng.IntN(dim + 1)
		hi := lo + rng.IntN(dim-lo+1)
		// Start at an odd offset: the encoder must not need alignment.
		buf, err := v.AppendEncodeRange([]byte{0xff}, lo, hi)
		noErr(t, err)
		noErr(t, got.Decode(buf[1:]))
		equal(t, hi-lo, got.Dim)
		equal(t, denseOf(v)[lo:hi], denseOf(&got))
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encoded(&Vector[float32]{Dim: 8, Indices: []uint32{1, 5}, Values: []float32{1, 2}}, nil)
	var v Vector[float32]
	noErr(t, v.Decode(good))

	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	cases := map[string][]byte{
		"short":         good[:10],
		"truncated":     good[:len(good)-1],
		"trailing":      append(slices.Clone(good), 0),
		"magic":         mutate(func(b []byte) []byte { b[0] = 0; return b }),
		"form":          mutate(func(b []byte) []byte { b[2] = 9; return b }),
		"float64":       mutate(func(b []byte) []byte { b[3] = typeFloat64; return b }),
		"type":          mutate(func(b []byte) []byte { b[3] = 7; return b }),
		"count>dim":     mutate(func(b []byte) []byte { b[8] = 1; return b }),
		"huge count":    mutate(func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0xff, 0xff, 0xff, 0x7f; return b }),
		"huge dim":      mutate(func(b []byte) []byte { b[15] = 1; return b }),
		"unsorted":      mutate(func(b []byte) []byte { b[HeaderSize+8] = 6; return b }),
		"out of range":  mutate(func(b []byte) []byte { b[HeaderSize+12] = 8; return b }),
		"dense lengths": mutate(func(b []byte) []byte { b[2] = formDense; return b }),
	}
	for name, b := range cases {
		err := v.Decode(b)
		errIs(t, err, ErrCorrupt, name)
		equal(t, 0, v.Dim, name)
	}
}

func TestKernelsDoNotAllocateInSteadyState(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	a := randomVector[float32](rng, 1<<16, 1000)
	b := randomVector[float32](rng, 1<<16, 1000)
	c := randomVector[float32](rng, 1<<16, 1000)
	var dst, got Vector[float32]
	dense := make([]float32, 1<<16)
	var buf []byte
	parts := []*Vector[float32]{a, b, c}
	d := randomVector[float32](rng, 1<<12, 1000) // accumulator path
	e := randomVector[float32](rng, 1<<12, 1000)
	var dst2 Vector[float32]
	run := func() {
		_ = Add(&dst, a, b)
		_ = Add(&dst2, d, e)
		_ = SumAll(&dst, parts)
		_ = a.AddTo(dense)
		buf = encoded(a, buf[:0])
		_ = got.Decode(buf)
	}
	run()
	equal(t, 0.0, testing.AllocsPerRun(20, run))
}

// TestKernelsSurviveInvalidVectors: unsorted, duplicate, out-of-range
// indices and mismatched lengths give errors or unspecified values, never
// a panic.
func TestKernelsSurviveInvalidVectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	garbage := func() *Vector[float32] {
		dim := rng.IntN(20)
		v := &Vector[float32]{Dim: dim, Dense: rng.IntN(5) == 0}
		for range rng.IntN(30) {
			v.Indices = append(v.Indices, uint32(rng.IntN(dim+3)))
			v.Values = append(v.Values, 1)
		}
		switch rng.IntN(4) {
		case 0:
			v.Values = v.Values[:len(v.Values)/2]
		case 1:
			v.Values = append(v.Values, make([]float32, dim)...)
		}
		return v
	}
	for range 1000 {
		a, b := garbage(), garbage()
		if rng.IntN(2) == 0 {
			b.Dim = a.Dim
		}
		var dst Vector[float32]
		_ = Add(&dst, a, b)
		_ = SumAll(&dst, []*Vector[float32]{a, b, garbage()})
		_ = a.AddTo(make([]float32, a.Dim))
		_ = a.ToDense(nil)
		_, _ = a.AppendEncode(nil)
		_, _ = a.AppendEncodeRange(nil, rng.IntN(30)-5, rng.IntN(30)-5)
		c := *a
		c.Values = append([]float32(nil), a.Values...)
		c.Densify()
		d := *b
		d.Values, d.Indices = append([]float32(nil), b.Values...), append([]uint32(nil), b.Indices...)
		d.Compact()
		e := *b
		e.Values, e.Indices = append([]float32(nil), b.Values...), append([]uint32(nil), b.Indices...)
		_ = e.Normalize()
	}
}
