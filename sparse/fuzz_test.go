package sparse

import (
	"math"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic or
// allocate beyond the input, and whatever it accepts must be a valid
// vector that re-encodes to a decodable message of the same values.
func FuzzDecode(f *testing.F) {
	f.Add(encoded(&Vector[float32]{Dim: 8, Indices: []uint32{1, 5}, Values: []float32{1, 2}}, nil))
	f.Add(encoded(&Vector[float64]{Dim: 3, Dense: true, Values: []float64{1, 2, 3}}, nil))
	f.Add(encoded(Zero[float32](0), nil))
	f.Add([]byte{magic, version, formSparse, typeFloat32, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v32 Vector[float32]
		if err := v32.Decode(b); err == nil {
			checkDecoded(t, &v32, b)
		}
		var v64 Vector[float64]
		if err := v64.Decode(b); err == nil {
			checkDecoded(t, &v64, b)
		}
		var view Vector[float32]
		if err := view.DecodeView(b); (err == nil) != (v32.Decode(b) == nil) {
			t.Fatalf("DecodeView error %v disagrees with Decode", err)
		} else if err == nil {
			again := encoded(&view, nil)
			if want := encoded(&v32, nil); string(again) != string(want) {
				t.Fatalf("DecodeView and Decode differ")
			}
		}
		if n, err := EncodedLen(b); err == nil && (n < HeaderSize || n > len(b)) {
			t.Fatalf("EncodedLen %d outside [%d, %d]", n, HeaderSize, len(b))
		}
	})
}

func checkDecoded[T Float](t *testing.T, v *Vector[T], b []byte) {
	if err := v.Validate(); err != nil {
		t.Fatalf("Decode accepted an invalid vector: %v", err)
	}
	if v.NNZ()*ValueSize[T]() > len(b) {
		t.Fatalf("decoded %d entries from %d bytes", v.NNZ(), len(b))
	}
	var again Vector[T]
	if err := again.Decode(encoded(v, nil)); err != nil {
		t.Fatalf("re-encoding does not decode: %v", err)
	}
	if again.Dim != v.Dim {
		t.Fatalf("dimension changed: %d then %d", v.Dim, again.Dim)
	}
}

// FuzzDecodeAt: DecodeAt of arbitrary bytes never panics, and whenever it
// accepts them it agrees with Decode, into a sparse vector (entries
// appended after an existing one) and into a dense one.
func FuzzDecodeAt(f *testing.F) {
	f.Add(encoded(&Vector[float32]{Dim: 8, Indices: []uint32{1, 5}, Values: []float32{1, 2}}, nil), uint16(3))
	f.Add(encoded(&Vector[float32]{Dim: 3, Dense: true, Values: []float32{1, 2, 3}}, nil), uint16(1))
	f.Add(encoded(&Vector[float32]{Dim: 8, Indices: []uint32{5, 1}, Values: []float32{1, 2}}, nil), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		lo := 1 + int(at)%64
		var ref Vector[float32]
		refErr := ref.Decode(b)
		sp := Vector[float32]{Dim: 1 << 20, Indices: []uint32{0}, Values: []float32{7}}
		dim, err := sp.DecodeAt(b, lo)
		if (err == nil) != (refErr == nil && !ref.IsBlock() && lo+ref.Dim <= sp.Dim) {
			t.Fatalf("DecodeAt error %v, Decode error %v", err, refErr)
		}
		if err != nil {
			if len(sp.Indices) != 1 || len(sp.Values) != 1 {
				t.Fatalf("failed DecodeAt left %d entries", len(sp.Indices))
			}
			return
		}
		if dim != ref.Dim {
			t.Fatalf("DecodeAt dimension %d, Decode %d", dim, ref.Dim)
		}
		want := ref.ToDense(nil)
		got := sp.ToDense(nil)[lo : lo+dim]
		de := Vector[float32]{Dim: 1 << 20, Dense: true, Values: make([]float32, 1<<20)}
		if _, err := de.DecodeAt(b, lo); err != nil {
			t.Fatalf("dense DecodeAt: %v", err)
		}
		for i := range want {
			w := math.Float32bits(want[i])
			if math.Float32bits(got[i]) != w || math.Float32bits(de.Values[lo+i]) != w {
				t.Fatalf("position %d: sparse %v, dense %v, Decode %v", i, got[i], de.Values[lo+i], want[i])
			}
		}
		if err := sp.Validate(); err != nil {
			t.Fatalf("DecodeAt produced an invalid vector: %v", err)
		}
	})
}
