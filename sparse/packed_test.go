package sparse

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomSparse returns a vector of dimension dim holding about density*dim
// entries at uniformly random positions, with random bit patterns as
// values (NaNs and signed zeros included, so exactness is bitwise).
func randomSparse[T Float](seed uint64, dim int, density float64) *Vector[T] {
	r := rand.New(rand.NewPCG(seed, 11))
	var idx []uint32
	for i := range dim {
		if r.Float64() < density {
			idx = append(idx, uint32(i))
		}
	}
	vals := make([]T, len(idx))
	b := valueBytes(vals)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return &Vector[T]{Dim: dim, Indices: idx, Values: vals}
}

// sameVector compares two vectors bitwise; in different forms (a packed
// slice can stay sparse where the raw one goes dense), as dense arrays.
func sameVector[T Float](t *testing.T, want, got *Vector[T], what string) {
	t.Helper()
	if want.Dense != got.Dense && want.Dim == got.Dim &&
		string(valueBytes(want.ToDense(nil))) == string(valueBytes(got.ToDense(nil))) {
		return
	}
	if want.Dim != got.Dim || want.Dense != got.Dense || !slices.Equal(want.Indices, got.Indices) ||
		string(valueBytes(want.Values)) != string(valueBytes(got.Values)) {
		t.Fatalf("%s: got dim %d dense %v %d entries, want dim %d dense %v %d entries",
			what, got.Dim, got.Dense, got.NNZ(), want.Dim, want.Dense, want.NNZ())
	}
}

// TestPackedMatchesRaw: every slice encoded with packed indices decodes,
// by Decode, DecodeView and DecodeAt into sparse and dense vectors, to
// exactly what the raw (version-1) encoding of the same slice decodes to,
// over densities from empty to dense and for both value types.
func TestPackedMatchesRaw(t *testing.T) {
	for _, density := range []float64{0, 0.0005, 0.01, 0.1, 0.3, 0.7, 1} {
		checkPackedMatchesRaw(t, randomSparse[float32](uint64(density*1e4)+1, 5000, density))
		checkPackedMatchesRaw(t, randomSparse[float64](uint64(density*1e4)+2, 5000, density))
	}
	checkPackedMatchesRaw(t, NewDense(make([]float32, 100)))
}

func checkPackedMatchesRaw[T Float](t *testing.T, v *Vector[T]) {
	t.Helper()
	for _, r := range [][2]int{{0, v.Dim}, {0, 0}, {17, v.Dim / 3}, {v.Dim / 3, v.Dim}, {v.Dim - 1, v.Dim}} {
		lo, hi := r[0], r[1]
		raw, err := v.AppendEncodeRange(nil, lo, hi)
		noErr(t, err)
		// Behind a prefix, as messages concatenated in one buffer are.
		packed, err := v.AppendEncodeRangePacked([]byte{9, 9, 9}, lo, hi)
		noErr(t, err)
		packed = packed[3:]
		isTrue(t, len(packed) <= len(raw), "packed", len(packed), "raw", len(raw))
		var want, got, view Vector[T]
		noErr(t, want.Decode(raw))
		noErr(t, got.Decode(packed), "Decode", lo, hi)
		sameVector(t, &want, &got, "Decode")
		aligned := append(make([]byte, 0, len(packed)+8), packed...)
		noErr(t, view.DecodeView(aligned))
		sameVector(t, &want, &view, "DecodeView")
		n, err := EncodedLen(append(slices.Clone(packed), 1, 2, 3))
		noErr(t, err)
		equal(t, len(packed), n)

		off := 5
		sp := Vector[T]{Dim: off + hi - lo, Indices: []uint32{1}, Values: []T{3}}
		_, err = sp.DecodeAt(packed, off)
		noErr(t, err)
		de := Vector[T]{Dim: off + hi - lo, Dense: true, Values: make([]T, off+hi-lo)}
		_, err = de.DecodeAt(packed, off)
		noErr(t, err)
		wantDense := want.ToDense(nil)
		if string(valueBytes(de.Values[off:])) != string(valueBytes(wantDense)) ||
			string(valueBytes(sp.ToDense(nil)[off:])) != string(valueBytes(wantDense)) {
			t.Fatalf("DecodeAt [%d,%d) differs from Decode", lo, hi)
		}
	}
}

// TestPackedOnePercent: at 1% density the packed encoding of a float32
// vector is at most 0.75x the raw one (the target), and a float64
// one smaller than raw; sizes are those of the real streams.
func TestPackedOnePercent(t *testing.T) {
	v := randomSparse[float32](3, 1<<20, 0.01)
	raw, _ := v.AppendEncode(nil)
	packed, _ := v.AppendEncodePacked(nil)
	isTrue(t, IsPacked(packed) && !IsPacked(raw))
	ratio := float64(len(packed)) / float64(len(raw))
	t.Logf("float32 1%%: packed %d bytes, raw %d, ratio %.3f", len(packed), len(raw), ratio)
	isTrue(t, ratio <= 0.75, "ratio", ratio)
	w := randomSparse[float64](4, 1<<20, 0.01)
	raw, _ = w.AppendEncode(nil)
	packed, _ = w.AppendEncodePacked(nil)
	isTrue(t, IsPacked(packed) && len(packed) < len(raw))
}

// TestPackedRejects: corrupt packed messages are refused with ErrCorrupt.
func TestPackedRejects(t *testing.T) {
	v := randomSparse[float32](5, 4096, 0.05)
	good, _ := v.AppendEncodePacked(nil)
	isTrue(t, IsPacked(good))
	corrupt := map[string]func(b []byte) []byte{
		"dense form":       func(b []byte) []byte { b[2] = formDense; return b },
		"stream too long":  func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<40); return b },
		"stream too short": func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1); return b },
		"count mismatch":   func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], uint32(v.NNZ()-1)); return b[:len(b)-4] },
		"trailing byte":    func(b []byte) []byte { return append(b, 0) },
		"truncated":        func(b []byte) []byte { return b[:len(b)-1] },
		"short header":     func(b []byte) []byte { return b[:20] },
		"dimension too low": func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[8:], uint64(v.Indices[len(v.Indices)-1]))
			return b
		},
	}
	for name, f := range corrupt {
		b := f(slices.Clone(good))
		var a Vector[float32]
		errIs(t, a.Decode(b), ErrCorrupt, name)
		errIs(t, a.DecodeView(b), ErrCorrupt, name)
		sp := Vector[float32]{Dim: 1 << 20}
		_, err := sp.DecodeAt(b, 0)
		isTrue(t, err != nil, name)
	}
	var d Vector[float64]
	errIs(t, d.Decode(good), ErrCorrupt, "wrong value type")
}

// FuzzDecodePacked feeds arbitrary bytes, seeded with packed encodings,
// to the exact decoders: they never panic, agree with each other, and
// whatever they accept is a valid vector whose packed re-encoding decodes
// to the same entries.
func FuzzDecodePacked(f *testing.F) {
	for _, d := range []float64{0.002, 0.05, 0.4} {
		b, _ := randomSparse[float32](7, 600, d).AppendEncodePacked(nil)
		f.Add(b, uint16(1))
	}
	b64, _ := randomSparse[float64](8, 300, 0.1).AppendEncodePacked(nil)
	f.Add(b64, uint16(2))
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		var ref Vector[float32]
		refErr := ref.Decode(b)
		var view Vector[float32]
		aligned := append(make([]byte, 0, len(b)+8), b...)
		if err := view.DecodeView(aligned); (err == nil) != (refErr == nil) {
			t.Fatalf("DecodeView error %v, Decode error %v", err, refErr)
		}
		lo := 1 + int(at)%64
		sp := Vector[float32]{Dim: 1 << 20, Indices: []uint32{0}, Values: []float32{7}}
		_, err := sp.DecodeAt(b, lo)
		if (err == nil) != (refErr == nil && lo+ref.Dim <= sp.Dim) {
			t.Fatalf("DecodeAt error %v, Decode error %v", err, refErr)
		}
		if refErr != nil {
			return
		}
		sameVector(t, &ref, &view, "DecodeView")
		noErr(t, ref.Validate())
		if ref.NNZ() > len(b) {
			t.Fatalf("decoded %d entries from %d bytes", ref.NNZ(), len(b))
		}
		again, err := ref.AppendEncodePacked(nil)
		noErr(t, err)
		var back Vector[float32]
		noErr(t, back.Decode(again))
		sameVector(t, &ref, &back, "packed re-encoding")
	})
}
