package sparse

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparcml/sparcml/quant"
)

var lossyKinds = []quant.Kind{quant.FP16, quant.BF16, quant.Q8, quant.Q4, quant.Q2}

func newCoder(t testing.TB, kind quant.Kind, seed uint64) *QuantCoder {
	q, err := NewQuantCoder(kind, quant.Options{Seed: seed})
	noErr(t, err)
	return q
}

// quantStep bounds the error of one quantization of x in a bucket whose
// largest magnitude is maxAbs: half an ulp of 11 (fp16) or 8 (bf16)
// significant bits plus fp16's absolute error below its normal range, or
// one step maxAbs/s of a stochastic codec.
func quantStep(kind quant.Kind, x, maxAbs float64) float64 {
	switch kind {
	case quant.FP16:
		return math.Abs(x)*0x1p-11 + 0x1p-25
	case quant.BF16:
		return math.Abs(x) * 0x1p-8
	}
	s := float64(int(1)<<(kind.Bits()-1) - 1)
	// The scale is maxAbs rounded to float32: allow its rounding too.
	return maxAbs * (1 + 0x1p-23) / s
}

// TestQuantRoundTrip: ranges of random vectors of every form decode to the
// same indices and to values within one quantization of the input, and
// the encoded size is the header plus the exact index and value streams.
func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range lossyKinds {
		q := newCoder(t, kind, 7)
		for _, dim := range []int{0, 1, 5, 100, 3000} {
			for _, nnz := range []int{0, 1, dim / 100, dim / 3, dim / 2, dim} {
				v := randomVector[float32](rng, dim, min(nnz, dim))
				for i := range v.Values {
					v.Values[i] = float32(rng.NormFloat64())
				}
				if nnz == dim && rng.IntN(2) == 0 {
					v.Densify()
				}
				lo := rng.IntN(dim + 1)
				hi := lo + rng.IntN(dim-lo+1)
				b, err := v.AppendEncodeRangeQuant([]byte{9}, lo, hi, q)
				noErr(t, err)
				equal(t, byte(9), b[0])
				n, err := EncodedLen(b[1:])
				noErr(t, err)
				equal(t, len(b)-1, n)
				var got Vector[float32]
				noErr(t, got.DecodeQuant(b[1:], q), kind, dim, nnz)
				want := &Vector[float32]{}
				want.Reset(hi - lo)
				a, e := v.RangeBounds(lo, hi)
				if v.Dense {
					a, e = 0, 0
					want.Dense, want.Values = true, append([]float32(nil), v.Values[lo:hi]...)
				}
				for i := a; i < e; i++ {
					want.Indices = append(want.Indices, v.Indices[i]-uint32(lo))
					want.Values = append(want.Values, v.Values[i])
				}
				wd, gd := want.ToDense(nil), got.ToDense(nil)
				equal(t, hi-lo, got.Dim)
				var maxAbs float64
				for _, x := range wd {
					maxAbs = max(maxAbs, math.Abs(float64(x)))
				}
				for i := range wd {
					if d := math.Abs(float64(gd[i] - wd[i])); d > quantStep(kind, float64(wd[i]), maxAbs) {
						t.Fatalf("%v dim %d: index %d: %v for %v", kind, dim, i, gd[i], wd[i])
					}
				}
				if !got.Dense {
					equal(t, want.Indices, got.Indices)
					is, err := quant.IndicesSize(got.Indices, quant.IndexAuto)
					noErr(t, err)
					equal(t, QuantHeaderSize+is+q.ValueBytes(len(got.Indices)), n)
					isTrue(t, !q.preferDense(len(got.Indices), got.Dim, is), "sparse form chosen past the rule")
				} else {
					equal(t, QuantHeaderSize+q.ValueBytes(got.Dim), n)
				}
			}
		}
	}
}

// TestQuantFloat64: float64 vectors travel through float32 and decode
// within one quantization; the value type is checked.
func TestQuantFloat64(t *testing.T) {
	q := newCoder(t, quant.BF16, 0)
	v := &Vector[float64]{Dim: 10, Indices: []uint32{2, 7}, Values: []float64{1.0 / 3, -1e10}}
	b, err := v.AppendEncodeQuant(nil, q)
	noErr(t, err)
	var got Vector[float64]
	noErr(t, got.DecodeQuant(b, q))
	equal(t, v.Indices, got.Indices)
	for i, x := range v.Values {
		isTrue(t, math.Abs(got.Values[i]-x) <= quantStep(quant.BF16, x, 0), x, got.Values[i])
	}
	var wrong Vector[float32]
	errIs(t, wrong.DecodeQuant(b, q), ErrCorrupt)
}

// TestQuantDecodeRejects: a decoder expecting one codec refuses another,
// exact encodings and quantized ones are not mixed up, and damaged
// headers fail.
func TestQuantDecodeRejects(t *testing.T) {
	v := &Vector[float32]{Dim: 1000, Indices: []uint32{1, 500, 999}, Values: []float32{1, 2, 3}}
	q4 := newCoder(t, quant.Q4, 1)
	b, err := v.AppendEncodeQuant(nil, q4)
	noErr(t, err)
	var got Vector[float32]
	errHas(t, got.DecodeQuant(b, newCoder(t, quant.Q8, 1)), "expected q8")
	q4b, err := NewQuantCoder(quant.Q4, quant.Options{BucketSize: 64})
	noErr(t, err)
	errHas(t, got.DecodeQuant(b, q4b), "buckets of 64")
	errHas(t, got.Decode(b), "quantized")
	errHas(t, got.DecodeQuant(encoded(v, nil), q4), "version 1")
	_, err = NewQuantCoder(quant.None, quant.Options{})
	errIs(t, err, ErrInvalid)
	for i := range QuantHeaderSize {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x40
		// A larger dimension is a valid message (the collective checks
		// the dimension it expects); anything else must be rejected.
		if err := got.DecodeQuant(bad, q4); err == nil && got.Dim == v.Dim {
			t.Fatalf("flipping header byte %d went unnoticed", i)
		}
	}
	errIs(t, got.DecodeQuant(b[:len(b)-1], q4), ErrCorrupt)
	errIs(t, got.DecodeQuant(append(b, 0), q4), ErrCorrupt)
	equal(t, 0, got.NNZ())
}

// TestQuantValueBytes: the size computed from the layout is the codec's.
func TestQuantValueBytes(t *testing.T) {
	for _, kind := range lossyKinds {
		for _, bucket := range []int{1, 7, 1024} {
			c, err := quant.New(kind, quant.Options{BucketSize: bucket})
			noErr(t, err)
			for _, n := range []int{0, 1, 6, 7, 8, 1023, 1024, 1025, 100003} {
				equal(t, uint64(c.EncodedSize(n)), QuantValueBytes(kind, bucket, uint64(n)), kind, bucket, n)
			}
		}
	}
}

// FuzzDecodeQuant feeds arbitrary bytes to DecodeQuant under every codec:
// it must never panic or decode more than 4 entries per input byte, and
// whatever it accepts must be a valid vector that re-encodes.
func FuzzDecodeQuant(f *testing.F) {
	v := &Vector[float32]{Dim: 300, Indices: []uint32{1, 5, 299}, Values: []float32{1, -2, 0.5}}
	for _, kind := range lossyKinds {
		q, _ := NewQuantCoder(kind, quant.Options{})
		b, _ := v.AppendEncodeQuant(nil, q)
		f.Add(b, uint8(kind))
		d, _ := NewDense([]float32{1, 2, 3}).AppendEncodeQuant(nil, q)
		f.Add(d, uint8(kind))
	}
	f.Fuzz(func(t *testing.T, b []byte, k uint8) {
		kind := lossyKinds[int(k)%len(lossyKinds)]
		q, err := NewQuantCoder(kind, quant.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var v32 Vector[float32]
		if err := v32.DecodeQuant(b, q); err == nil {
			checkQuantDecoded(t, &v32, b, q)
		}
		var v64 Vector[float64]
		if err := v64.DecodeQuant(b, q); err == nil {
			checkQuantDecoded(t, &v64, b, q)
		}
		if n, err := EncodedLen(b); err == nil && (n < HeaderSize || n > len(b)) {
			t.Fatalf("EncodedLen %d outside [%d, %d]", n, HeaderSize, len(b))
		}
	})
}

func checkQuantDecoded[T Float](t *testing.T, v *Vector[T], b []byte, q *QuantCoder) {
	if err := v.Validate(); err != nil {
		t.Fatalf("DecodeQuant accepted an invalid vector: %v", err)
	}
	if v.NNZ() > 4*len(b) {
		t.Fatalf("decoded %d entries from %d bytes", v.NNZ(), len(b))
	}
	again, err := v.AppendEncodeQuant(nil, q)
	if err != nil {
		t.Fatalf("re-encoding failed: %v", err)
	}
	var w Vector[T]
	if err := w.DecodeQuant(again, q); err != nil || w.Dim != v.Dim {
		t.Fatalf("re-encoding does not decode to dimension %d: %v", v.Dim, err)
	}
}
