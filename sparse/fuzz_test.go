package sparse

import (
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
