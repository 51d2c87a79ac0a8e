package sparse

import (
	"math"
	"math/rand/v2"
	"reflect"
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
		err32 := v32.DecodeQuant(b, q)
		if err32 == nil {
			checkQuantDecoded(t, &v32, b, q)
		}
		checkQuantDecodeAt(t, &v32, err32 == nil, b, q)
		var v64 Vector[float64]
		err64 := v64.DecodeQuant(b, q)
		if err64 == nil {
			checkQuantDecoded(t, &v64, b, q)
		}
		checkQuantDecodeAt(t, &v64, err64 == nil, b, q)
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

// checkQuantDecodeAt holds DecodeQuantAt and DecodeQuantOwnAt to
// DecodeQuant on the same bytes (ref holds DecodeQuant's result, empty if
// it refused them): into a sparse vector after an existing entry and into
// a dense one, the bytes must be accepted exactly when DecodeQuant accepts
// them (ok), give its entries shifted, and on refusal leave the target
// as it was.
func checkQuantDecodeAt[T Float](t *testing.T, ref *Vector[T], ok bool, b []byte, q *QuantCoder) {
	const lo = 3
	if ref.Dim > 1<<16 {
		return // too large a target to build for a fuzz input
	}
	dim := ref.Dim + lo + 1
	sp := Vector[T]{Dim: dim, Indices: []uint32{1}, Values: []T{7}}
	n, err := sp.DecodeQuantAt(b, lo, q)
	if (err == nil) != ok {
		t.Fatalf("DecodeQuantAt error %v where DecodeQuant accepted: %v", err, ok)
	}
	if err != nil {
		if len(sp.Indices) != 1 || len(sp.Values) != 1 || sp.Indices[0] != 1 || sp.Values[0] != 7 {
			t.Fatalf("a failed DecodeQuantAt changed the vector: %v", sp)
		}
	} else {
		if n != ref.Dim {
			t.Fatalf("DecodeQuantAt returned dimension %d, DecodeQuant %d", n, ref.Dim)
		}
		want := ref.ToDense(nil)
		got := sp.ToDense(nil)
		for i, x := range want {
			if math.Float64bits(float64(got[lo+i])) != math.Float64bits(float64(x)) {
				t.Fatalf("DecodeQuantAt position %d: %v, DecodeQuant %v", i, got[lo+i], x)
			}
		}
		if got[1] != 7 {
			t.Fatal("DecodeQuantAt lost the entry before its slice")
		}
		if err := sp.Validate(); err != nil {
			t.Fatalf("DecodeQuantAt made an invalid vector: %v", err)
		}
		if !ref.Dense {
			own := Vector[T]{Dim: dim, Indices: []uint32{1}, Values: []T{7}}
			if _, err := own.DecodeQuantOwnAt(b, lo, q, ref); err != nil {
				t.Fatalf("DecodeQuantOwnAt refused what DecodeQuant accepted: %v", err)
			}
			same := reflect.DeepEqual(own.Indices, sp.Indices) && len(own.Values) == len(sp.Values)
			for i := range own.Values {
				same = same && math.Float64bits(float64(own.Values[i])) == math.Float64bits(float64(sp.Values[i]))
			}
			if !same {
				t.Fatal("DecodeQuantOwnAt differs from DecodeQuantAt")
			}
		}
	}
	dense := Vector[T]{Dim: dim, Dense: true, Values: make([]T, dim)}
	for i := range dense.Values {
		dense.Values[i] = 5
	}
	if _, err := dense.DecodeQuantAt(b, lo, q); (err == nil) != ok {
		t.Fatalf("dense DecodeQuantAt error %v where DecodeQuant accepted: %v", err, ok)
	} else if err != nil {
		for i, x := range dense.Values {
			if x != 5 {
				t.Fatalf("a failed dense DecodeQuantAt wrote position %d", i)
			}
		}
	} else {
		want := ref.ToDense(nil)
		for i, x := range want {
			if math.Float64bits(float64(dense.Values[lo+i])) != math.Float64bits(float64(x)) {
				t.Fatalf("dense DecodeQuantAt position %d: %v, DecodeQuant %v", i, dense.Values[lo+i], x)
			}
		}
		if dense.Values[lo-1] != 5 || dense.Values[dim-1] != 5 {
			t.Fatal("dense DecodeQuantAt wrote outside its slice")
		}
	}
}

// TestQuantDecodeAt: random vectors' ranges, encoded in every codec and
// decoded into place, equal DecodeQuant of the same bytes at their offset,
// in sparse and dense targets, concatenated in order as an allgather of
// ranges does; misuse (a slice outside the target, or before an existing
// entry) is refused.
func TestQuantDecodeAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for _, kind := range lossyKinds {
		q := newCoder(t, kind, 3)
		for _, dim := range []int{1, 100, 5000} {
			for _, nnz := range []int{0, 1, dim / 100, dim / 3, dim} {
				v := randomVector[float32](rng, dim, min(nnz, dim))
				for i := range v.Values {
					v.Values[i] = float32(rng.NormFloat64())
				}
				bounds := []int{0, dim / 3, dim / 2, dim}
				sp := Vector[float32]{Dim: dim}
				dn := Vector[float32]{Dim: dim, Dense: true, Values: make([]float32, dim)}
				var want []float32
				for r := range 3 {
					lo, hi := bounds[r], bounds[r+1]
					b, err := v.AppendEncodeRangeQuant(nil, lo, hi, q)
					noErr(t, err)
					var ref Vector[float32]
					noErr(t, ref.DecodeQuant(b, q))
					want = append(want, ref.ToDense(nil)...)
					n, err := sp.DecodeQuantAt(b, lo, q)
					noErr(t, err, kind, dim, nnz, r)
					equal(t, hi-lo, n)
					_, err = dn.DecodeQuantAt(b, lo, q)
					noErr(t, err)
					if !ref.Dense {
						// The indices the encoder read, rebased to lo.
						own := Vector[float32]{Dim: hi - lo}
						a, e := v.RangeBounds(lo, hi)
						for _, x := range v.Indices[a:e] {
							own.Indices = append(own.Indices, x-uint32(lo))
						}
						own.Values = ref.Values
						o := Vector[float32]{Dim: dim}
						_, err = o.DecodeQuantOwnAt(b, lo, q, &own)
						noErr(t, err)
						got := o.ToDense(nil)
						equal(t, ref.ToDense(nil), got[lo:hi])
					}
				}
				noErr(t, sp.Validate())
				equal(t, want, sp.ToDense(nil), kind, dim, nnz)
				equal(t, want, dn.Values, kind, dim, nnz)

				b, err := v.AppendEncodeRangeQuant(nil, 0, dim, q)
				noErr(t, err)
				_, err = (&Vector[float32]{Dim: dim - 1}).DecodeQuantAt(b, 0, q)
				errIs(t, err, ErrInvalid)
				if dim > 1 {
					late := Vector[float32]{Dim: 2 * dim, Indices: []uint32{uint32(dim)}, Values: []float32{1}}
					_, err = late.DecodeQuantAt(b, dim-1, q)
					errIs(t, err, ErrInvalid)
				}
			}
		}
	}
}
