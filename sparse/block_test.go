package sparse

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomBlock returns a block vector of rows rows of width values with
// about frac of its rows stored, values small nonzero integers.
func randomBlock(rng *rand.Rand, rows, width int, frac float64) *Vector[float32] {
	v := &Vector[float32]{Dim: rows, Block: width}
	for r := range rows {
		if rng.Float64() < frac {
			v.Indices = append(v.Indices, uint32(r))
			for range width {
				v.Values = append(v.Values, float32(1+rng.IntN(9)))
			}
		}
	}
	return v
}

// denseRows is v as a dense row-major matrix, computed row by row.
func denseRows(v *Vector[float32]) []float32 {
	b := v.BlockLen()
	out := make([]float32, v.Dim*b)
	if v.Dense {
		copy(out, v.Values)
		return out
	}
	for k, r := range v.Indices {
		copy(out[int(r)*b:], v.Values[k*b:(k+1)*b])
	}
	return out
}

// TestBlockEncodeRoundTrip: every range of a block vector, sparse or
// dense, decodes (Decode, DecodeView, DecodeAt) to the same rows, and a
// sparse message is the header, one index per row and the rows' values.
func TestBlockEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		rows, width := 1+rng.IntN(50), 2+rng.IntN(10)
		v := randomBlock(rng, rows, width, rng.Float64())
		if rng.IntN(3) == 0 {
			v.Densify()
		}
		lo := rng.IntN(rows + 1)
		hi := lo + rng.IntN(rows-lo+1)
		b, err := v.AppendEncodeRange(nil, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		want := denseRows(v)[lo*width : hi*width]
		var got Vector[float32]
		if err := got.Decode(b); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if got.Dim != hi-lo || got.BlockLen() != width || !slices.Equal(denseRows(&got), want) {
			t.Fatalf("range [%d,%d) of %d rows of %d: decoded %d rows of %d differ", lo, hi, rows, width, got.Dim, got.BlockLen())
		}
		if !got.Dense && len(b) != BlockHeaderSize+got.NNZ()*(IndexSize+width*4) {
			t.Fatalf("sparse message of %d rows of %d is %d bytes", got.NNZ(), width, len(b))
		}
		var view Vector[float32]
		if err := view.DecodeView(b); err != nil || !slices.Equal(denseRows(&view), want) {
			t.Fatalf("DecodeView: %v", err)
		}
		at := &Vector[float32]{Dim: hi - lo + 3, Block: width}
		if _, err := at.DecodeAt(b, 3); err != nil {
			t.Fatalf("DecodeAt: %v", err)
		}
		if !slices.Equal(denseRows(at)[3*width:], want) {
			t.Fatalf("DecodeAt differs")
		}
		for k := range at.Indices {
			if rowIsZero(at.Values[k*width : (k+1)*width]) {
				t.Fatalf("DecodeAt stored an all-zero row %d", at.Indices[k])
			}
		}
	}
}

// TestBlockSumAll: SumAll and Add of block parts equal the sum of their
// dense matrices, and rows stored in a sparse result are the touched ones.
func TestBlockSumAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		rows, width, k := 1+rng.IntN(60), 2+rng.IntN(6), 1+rng.IntN(9)
		parts := make([]*Vector[float32], k)
		ref := make([]float32, rows*width)
		touched := map[uint32]bool{}
		for i := range parts {
			parts[i] = randomBlock(rng, rows, width, rng.Float64()*rng.Float64())
			for _, r := range parts[i].Indices {
				touched[r] = true
			}
			if rng.IntN(8) == 0 {
				parts[i].Densify()
				for r := range rows {
					touched[uint32(r)] = true
				}
			}
			for j, x := range denseRows(parts[i]) {
				ref[j] += x
			}
		}
		var dst Vector[float32]
		if err := SumAll(&dst, parts); err != nil {
			t.Fatal(err)
		}
		if err := dst.Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(denseRows(&dst), ref) {
			t.Fatalf("%d parts of %d rows of %d: sum differs", k, rows, width)
		}
		if !dst.Dense && len(dst.Indices) != len(touched) {
			t.Fatalf("%d rows stored, %d touched", len(dst.Indices), len(touched))
		}
	}
}

// TestBlockNormalizeCompact: Normalize sorts rows and sums repeats;
// Compact of a dense block vector keeps exactly the nonzero rows.
func TestBlockNormalizeCompact(t *testing.T) {
	v := &Vector[float32]{Dim: 10, Block: 2, Indices: []uint32{7, 2, 7}, Values: []float32{1, 2, 3, 4, 5, 6}}
	if err := v.Normalize(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.Indices, []uint32{2, 7}) || !slices.Equal(v.Values, []float32{3, 4, 6, 8}) {
		t.Fatalf("Normalize: %v %v", v.Indices, v.Values)
	}
	d := &Vector[float32]{Dim: 100, Block: 3, Dense: true, Values: make([]float32, 300)}
	d.Values[3*5+1], d.Values[3*40] = 1, float32(math.Copysign(0, -1))
	d.Compact()
	if d.Dense || !slices.Equal(d.Indices, []uint32{5}) || !slices.Equal(d.Values, []float32{0, 1, 0}) {
		t.Fatalf("Compact: dense=%v %v %v", d.Dense, d.Indices, d.Values)
	}
	e := &Vector[float32]{Dim: 4, Dense: true, Values: []float32{0, 2, 0, 0}}
	e.Sparsify()
	if e.Dense || !slices.Equal(e.Indices, []uint32{1}) || !slices.Equal(e.Values, []float32{2}) {
		t.Fatalf("Sparsify: dense=%v %v %v", e.Dense, e.Indices, e.Values)
	}
	bad := &Vector[float32]{Dim: 10, Block: 2, Indices: []uint32{1}, Values: []float32{1}}
	if bad.Validate() == nil {
		t.Fatal("a row of 1 value in a block of 2 validated")
	}
}

// FuzzDecodeBlock feeds arbitrary bytes, seeded with block encodings, to
// the decoders: never a panic; whatever Decode accepts is valid and
// DecodeView and DecodeAt (into sparse and dense vectors of its block)
// agree with it.
func FuzzDecodeBlock(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, frac := range []float64{0, 0.2, 0.99} {
		b, _ := randomBlock(rng, 20, 3, frac).AppendEncode(nil)
		f.Add(b)
	}
	f.Add([]byte{magic, versionBlock, formSparse, typeFloat32, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v Vector[float32]
		if v.Decode(b) != nil {
			var view Vector[float32]
			if view.DecodeView(b) == nil {
				t.Fatal("DecodeView accepted what Decode refused")
			}
			return
		}
		if err := v.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid vector: %v", err)
		}
		if v.NNZ()*v.BlockLen()*4 > len(b) {
			t.Fatalf("decoded %d rows of %d from %d bytes", v.NNZ(), v.BlockLen(), len(b))
		}
		if v.Dim*v.BlockLen() > 1<<16 {
			return // an empty sparse vector of huge dimension: nothing to compare densely
		}
		want := denseRows(&v)
		var view Vector[float32]
		if err := view.DecodeView(b); err != nil || !sameRowBits(denseRows(&view), want) {
			t.Fatalf("DecodeView disagrees with Decode: %v", err)
		}
		if !v.IsBlock() {
			return
		}
		sp := &Vector[float32]{Dim: v.Dim + 1, Block: v.Block, Indices: []uint32{0}, Values: make([]float32, v.Block)}
		sp.Values[0] = 7
		de := &Vector[float32]{Dim: v.Dim + 1, Block: v.Block, Dense: true, Values: make([]float32, (v.Dim+1)*v.Block)}
		for _, dst := range []*Vector[float32]{sp, de} {
			if _, err := dst.DecodeAt(b, 1); err != nil {
				t.Fatalf("DecodeAt: %v", err)
			}
			if err := dst.Validate(); err != nil {
				t.Fatalf("DecodeAt made an invalid vector: %v", err)
			}
			if !sameRowBits(denseRows(dst)[v.Block:], want) {
				t.Fatalf("DecodeAt disagrees with Decode")
			}
		}
	})
}

// sameRowBits compares values bit for bit (NaN payloads included).
func sameRowBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
