package collectives

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// FuzzSparseAgreementRecord: the counts-exchange record comes off the
// network; whatever spParseRecord accepts must be in range.
func FuzzSparseAgreementRecord(f *testing.F) {
	v := &sparse.Vector[float32]{Dim: 100, Indices: []uint32{3, 50, 99}, Values: []float32{1, 2, 3}}
	f.Add(spAppendRecord(nil, SparseOptions{Balanced: true}, 3, spSampleIndices(v, 8)), 100)
	f.Add(spAppendRecord(nil, SparseOptions{Algo: AlgoDSAR}, 0, nil), 1)
	f.Fuzz(func(t *testing.T, b []byte, dim int) {
		if dim < 0 || dim > sparse.MaxDim {
			return
		}
		if n, err := spRecordSize(b); err == nil && (n < spAgreeHeader || n > len(b)) {
			t.Fatalf("record size %d outside [%d, %d]", n, spAgreeHeader, len(b))
		}
		rec, err := spParseRecord(b, dim)
		if err != nil {
			return
		}
		if rec.nnz > dim || len(rec.samples) > spAgreeMaxSamples {
			t.Fatalf("accepted %d entries, %d samples for dimension %d", rec.nnz, len(rec.samples), dim)
		}
		for i, s := range rec.samples {
			if int(s) >= dim || (i > 0 && s < rec.samples[i-1]) {
				t.Fatalf("accepted sample %d at %d", s, i)
			}
		}
	})
}

// TestSparseBalancedBoundsAreRanges: whatever the samples, the bounds
// start at 0, end at the dimension and never decrease.
func TestSparseBalancedBoundsAreRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 400 {
		p := 1 + rng.IntN(12)
		dim := rng.IntN(1000)
		ag := &spAgreement{nnz: make([]int, p), samples: make([][]uint32, p)}
		for r := range p {
			if dim == 0 || rng.IntN(3) == 0 {
				continue
			}
			ag.nnz[r] = 1 + rng.IntN(dim)
			v := &sparse.Vector[float64]{Dim: dim}
			for i := 0; i < dim; i++ {
				if rng.IntN(dim) < ag.nnz[r] {
					v.Indices = append(v.Indices, uint32(i))
				}
			}
			ag.nnz[r] = len(v.Indices)
			ag.samples[r] = spSampleIndices(v, spSampleCount(p))
		}
		b := ag.balancedBounds(dim, p)
		if len(b) != p+1 || b[0] != 0 || b[p] != dim {
			t.Fatalf("bounds %v for dimension %d", b, dim)
		}
		for i := 1; i <= p; i++ {
			if b[i] < b[i-1] {
				t.Fatalf("bounds %v decrease", b)
			}
		}
	}
}

// TestSparseRejectsCorruptPeerMessage: a peer that sends garbage in place
// of a partial sum makes the operation fail with a protocol error, never
// panic or sum it.
func TestSparseRejectsCorruptPeerMessage(t *testing.T) {
	good := spEncoded(&sparse.Vector[float32]{Dim: 10, Indices: []uint32{1}, Values: []float32{1}})
	corrupt := map[string][]byte{
		"short":       good[:5],
		"unsorted":    spEncoded(&sparse.Vector[float32]{Dim: 10, Indices: []uint32{4, 2}, Values: []float32{1, 1}}),
		"wrong dim":   spEncoded(&sparse.Vector[float32]{Dim: 11, Indices: []uint32{1}, Values: []float32{1}}),
		"wrong type":  spEncoded(&sparse.Vector[float64]{Dim: 10, Indices: []uint32{1}, Values: []float64{1}}),
		"two vectors": append(append([]byte{}, good...), good...),
	}
	for name, msg := range corrupt {
		ts := transport.NewInMemory(2)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		desc := transport.Desc{Kind: transport.OpSparseAllreduce, DType: uint8(Float32), Algo: uint8(AlgoSSARRecursiveDoubling), Count: 10}
		ts[1].Send(0, transport.Tag{Comm: 1, Seq: 1, Step: spStepRD}, desc, msg)
		op := &Op{Ctx: ctx, T: ts[0], Comm: 1, Seq: 1, Pool: &Buffers{}}
		in := &sparse.Vector[float32]{Dim: 10, Indices: []uint32{2}, Values: []float32{1}}
		_, err := SparseAllreduce(op, in, &sparse.Vector[float32]{}, SparseOptions{Algo: AlgoSSARRecursiveDoubling})
		cancel()
		for _, tr := range ts {
			tr.Close()
		}
		if !errors.Is(err, transport.ErrProtocol) && !errors.Is(err, transport.ErrMismatch) {
			t.Fatalf("%s: got %v, want a protocol error", name, err)
		}
	}
}

func spEncoded[T Float](v *sparse.Vector[T]) []byte {
	b, err := v.AppendEncode(nil)
	if err != nil {
		panic(err)
	}
	return b
}
