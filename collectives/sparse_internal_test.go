package collectives

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// FuzzSparseAgreementRecord: the counts-exchange record (and, in the
// carrying exchange, the slice behind it) comes off the network; whatever
// spParseRecord and spSplitCarrying accept must be in range.
func FuzzSparseAgreementRecord(f *testing.F) {
	v := &sparse.Vector[float32]{Dim: 100, Indices: []uint32{3, 50, 99}, Values: []float32{1, 2, 3}}
	f.Add(spAppendRecord(nil, SparseOptions{Balanced: true}, 3, spSampleIndices(v, 8, 1, 2), false), 100)
	f.Add(spAppendRecord(nil, SparseOptions{Algo: AlgoDSAR}, 0, nil, false), 1)
	carrying := spAppendRecord(nil, SparseOptions{}, 3, spSampleIndices(v, 2, 1, 2), true)
	carrying, _ = v.AppendEncodeRange(carrying, 40, 100)
	f.Add(carrying, 100)
	f.Fuzz(func(t *testing.T, b []byte, dim int) {
		if dim < 0 || dim > sparse.MaxDim {
			return
		}
		if n, err := spRecordSize(b); err == nil && (n < spAgreeHeader || n > len(b)) {
			t.Fatalf("record size %d outside [%d, %d]", n, spAgreeHeader, len(b))
		}
		if rec, tail, err := spSplitCarrying(b); err == nil {
			if len(rec)+len(tail) != len(b) || len(rec) < spAgreeHeader {
				t.Fatalf("split %d bytes into a record of %d and a slice of %d", len(b), len(rec), len(tail))
			}
			if n, err := sparse.EncodedLen(tail); len(tail) > 0 && (err != nil || n != len(tail)) {
				t.Fatalf("accepted a slice of %d bytes that encodes %d (%v)", len(tail), n, err)
			}
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
			ag.samples[r] = spSampleIndices(v, spSampleCount(p, dim, ag.nnz[r]), 1, 2)
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
		if want := quantileBounds(ag, dim, p); !slices.Equal(b, want) {
			t.Fatalf("bounds %v, want the weighted quantiles %v (nnz %v)", b, want, ag.nnz)
		}
	}
}

// quantileBounds is balancedBounds by its definition, for reference: inner
// bound i is the least s+1, s a sample, such that the samples up to s
// weigh at least i/p of all (a sample of rank r weighs nnz[r]/q[r]); equal
// ranges when nothing is stored.
func quantileBounds(ag *spAgreement, dim, p int) []int {
	var total uint64
	for r, s := range ag.samples {
		total += uint64(len(s)) * spSampleWeight(ag.nnz[r], len(s))
	}
	if total == 0 {
		return spEqualBounds(dim, p)
	}
	upTo := func(x uint32) (w uint64) {
		for r, s := range ag.samples {
			for _, y := range s {
				if y <= x {
					w += spSampleWeight(ag.nnz[r], len(s))
				}
			}
		}
		return w
	}
	b := make([]int, p+1)
	b[p] = dim
	for i := 1; i < p; i++ {
		b[i] = dim
		for _, s := range ag.samples {
			for _, x := range s {
				if upTo(x)*uint64(p) >= uint64(i)*total {
					b[i] = min(b[i], int(x)+1)
				}
			}
		}
	}
	return b
}

// BenchmarkBalancedBounds: the bounds of P ranks' samples, on the path of
// every AlgoAuto call.
func BenchmarkBalancedBounds(b *testing.B) {
	for _, p := range []int{8, 64, 256} {
		rng := rand.New(rand.NewPCG(1, 2))
		ag := &spAgreement{nnz: make([]int, p), samples: make([][]uint32, p)}
		for r := range p {
			ag.nnz[r] = 1000 + r
			s := make([]uint32, spSampleCount(p, 1<<24, 1<<20))
			for i := range s {
				s[i] = rng.Uint32N(1 << 24)
			}
			slices.Sort(s)
			ag.samples[r] = s
		}
		b.Run(fmt.Sprintf("P=%d", p), func(b *testing.B) {
			for b.Loop() {
				ag.balancedBounds(1<<24, p)
			}
		})
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

// TestIndexBytesEstimateMatchesEncoding: the model's expected size of an
// index stream is within 3% of the mean size of real encodings (quant's
// IndexAuto) of uniformly random supports, from sparse to half full and
// in blocks shorter than quant.IndexBlockSize.
func TestIndexBytesEstimateMatchesEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	for _, c := range []struct{ k, n int }{{50, 1 << 20}, {1000, 1 << 20}, {16604, 1 << 22}, {161000, 1 << 21}, {1 << 19, 1 << 20}} {
		const trials = 5
		total := 0
		for range trials {
			idx := make([]uint32, 0, c.k)
			for _, x := range rng.Perm(c.n)[:c.k] {
				idx = append(idx, uint32(x))
			}
			slices.Sort(idx)
			enc, err := quant.EncodeIndices(make([]byte, quant.MaxIndicesSize(c.k, quant.IndexAuto)), idx, quant.IndexAuto)
			if err != nil {
				t.Fatal(err)
			}
			total += len(enc)
		}
		got, want := spIndexBytesEstimate(float64(c.k), c.n), float64(total)/trials
		if math.Abs(got-want) > 0.03*want {
			t.Errorf("k=%d n=%d: estimate %.0f bytes, encodings %.0f", c.k, c.n, got, want)
		}
	}
}

// BenchmarkChooseSparse times AlgoAuto's choice, made on every call from
// the agreed counts: 0.1% and 1% of 16M per rank, exact and q4 values,
// on 4 and 8 ranks and at the simulator's scale of 1024.
func BenchmarkChooseSparse(b *testing.B) {
	m := CostModel{Alpha: 50e-6, Beta: 1 / 125e6, Gamma: 1 / 4e9, IndexCodec: 4e-9}
	const dim = 1 << 24
	for _, p := range []int{4, 8, 1024} {
		for _, frac := range []float64{0.001, 0.01} {
			for _, kind := range []quant.Kind{quant.None, quant.Q4} {
				nnz := make([]int, p)
				for r := range nnz {
					nnz[r] = int(frac * dim)
				}
				b.Run(fmt.Sprintf("p=%d/density=%g/%v", p, frac, kind), func(b *testing.B) {
					w := spWireFor(4, kind)
					for b.Loop() {
						m.chooseSparseOrDense(p, dim, w, nnz)
					}
				})
			}
		}
	}
}

// TestBalancedBoundsWeighSamples: ranks of very different counts send
// different numbers of samples (spSampleCount: one per 8 entries, at most
// 128), and each sample weighs its rank's count over its samples, so the
// ranges hold about equal shares of all the entries, counted on the
// supports themselves: 15 light ranks of 512 entries spread over the whole
// dimension (64 samples each) and a heavy one of 7680 on its upper half
// (128 samples). Weighing every sample by its rank's count alone would
// give the light half a fifth of the weight.
func TestBalancedBoundsWeighSamples(t *testing.T) {
	const dim, p = 1 << 16, 16
	var vs []*sparse.Vector[float32]
	for r := range p - 1 {
		v := &sparse.Vector[float32]{Dim: dim}
		for i := r; i < dim; i += dim / 512 {
			v.Indices = append(v.Indices, uint32(i))
		}
		vs = append(vs, v)
	}
	heavy := &sparse.Vector[float32]{Dim: dim}
	for i := dim / 2; i < dim; i += 4 {
		heavy.Indices = append(heavy.Indices, uint32(i))
	}
	heavy.Indices = heavy.Indices[:7680]
	vs = append(vs, heavy)
	ag := &spAgreement{}
	total := 0
	for _, v := range vs {
		ag.nnz = append(ag.nnz, len(v.Indices))
		ag.samples = append(ag.samples, spSampleIndices(v, spSampleCount(p, dim, len(v.Indices)), 1, 2))
		total += len(v.Indices)
	}
	if len(ag.samples[0]) != 64 || len(ag.samples[p-1]) != 128 {
		t.Fatalf("samples %d and %d, want 64 and 128", len(ag.samples[0]), len(ag.samples[p-1]))
	}
	if !ag.equalRangesSkewed(dim, p) {
		t.Errorf("equal ranges not found skewed: the heavy rank's upper half holds %d of %d entries", 7680+7*512, total)
	}
	b := ag.balancedBounds(dim, p)
	for q := range p {
		n := 0
		for _, v := range vs {
			n += sparse.LowerBound(v.Indices, b[q+1]) - sparse.LowerBound(v.Indices, b[q])
		}
		if share := float64(n) / float64(total); math.Abs(share*p-1) > 0.3 {
			t.Errorf("range %d [%d, %d) holds %.3f of the entries, want 1/%d (bounds %v)", q, b[q], b[q+1], share, p, b)
		}
	}
}

// TestDirectAgree: the counts exchange goes in one round only where the
// model knows the latency that messages posted together overlap; with a
// full Alpha per message (DefaultCostModel, a calibration) it stays
// Bruck's at every P.
func TestDirectAgree(t *testing.T) {
	sim := CostModel{Alpha: 5e-6, Beta: 1 / 1.25e9, Gamma: 1 / 4e9, Latency: 5e-6}
	withOverhead := sim
	withOverhead.Alpha = 7e-6 // L = 5 us, 2o = 2 us
	for _, tc := range []struct {
		m    CostModel
		p    int
		want bool
	}{
		{DefaultCostModel, 2, false}, {DefaultCostModel, 8, false}, {DefaultCostModel, 1024, false},
		{CostModel{}, 64, false},
		{sim, 2, false}, {sim, 3, true}, {sim, 1024, true},
		{withOverhead, 8, true}, {withOverhead, 16, false},
	} {
		if got := spDirectAgree(tc.m, tc.p); got != tc.want {
			t.Errorf("model %+v, P = %d: direct %v, want %v", tc.m, tc.p, got, tc.want)
		}
	}
}

// TestEqualRangesSkewed: the samples of the counts exchange (staggered
// by rank, spSampleCount a rank) find the equal ranges balanced on
// uniform random supports, and skewed on a power-law support (index =
// n u^6) and when every rank puts a share of its entries in one range: at
// 256 ranks 1 in 250 (a hot spot of twice the mean share in all, which no
// rank's own support shows beyond its noise: 10 entries where 10 fall),
// at 1024 ranks, where 16 samples a rank find a skew from about 3.5x the
// mean share, 1 in 50 (6x). Each skewed case is checked to hold at least
// 1.5x the mean share in an equal range, counted on the supports.
func TestEqualRangesSkewed(t *testing.T) {
	const dim = 1 << 18
	for _, tc := range []struct {
		name string
		p, k int
		draw func(rng *rand.Rand) uint32
		want bool
	}{
		{"uniform 256 ranks 1%", 256, dim / 100, func(rng *rand.Rand) uint32 { return rng.Uint32N(dim) }, false},
		{"uniform 128 ranks 0.1%", 128, dim / 1000, func(rng *rand.Rand) uint32 { return rng.Uint32N(dim) }, false},
		{"uniform 8 ranks 1%", 8, dim / 100, func(rng *rand.Rand) uint32 { return rng.Uint32N(dim) }, false},
		{"power law 256 ranks 1%", 256, dim / 100, func(rng *rand.Rand) uint32 { return uint32(dim * math.Pow(rng.Float64(), 6)) }, true},
		{"uniform 1024 ranks 1%", 1024, dim / 100, func(rng *rand.Rand) uint32 { return rng.Uint32N(dim) }, false},
		{"power law 1024 ranks 1%", 1024, dim / 100, func(rng *rand.Rand) uint32 { return uint32(dim * math.Pow(rng.Float64(), 6)) }, true},
		{"hot range 1024 ranks 1%", 1024, dim / 100, func(rng *rand.Rand) uint32 {
			if rng.IntN(50) == 0 {
				return dim/2 + rng.Uint32N(dim/256)
			}
			return rng.Uint32N(dim)
		}, true},
		{"hot range 256 ranks 1%", 256, dim / 100, func(rng *rand.Rand) uint32 {
			if rng.IntN(250) == 0 {
				return dim/2 + rng.Uint32N(dim/256)
			}
			return rng.Uint32N(dim)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.p), uint64(tc.k)))
			ag := &spAgreement{nnz: make([]int, tc.p), samples: make([][]uint32, tc.p)}
			eq := spEqualBounds(dim, tc.p)
			load := make([]int, tc.p)
			for r := range tc.p {
				set := map[uint32]bool{}
				for len(set) < tc.k {
					set[tc.draw(rng)] = true
				}
				v := &sparse.Vector[float32]{Dim: dim}
				for i := range set {
					v.Indices = append(v.Indices, i)
				}
				slices.Sort(v.Indices)
				ag.nnz[r] = tc.k
				ag.samples[r] = spSampleIndices(v, spSampleCount(tc.p, dim, tc.k), uint64(2*r+1), uint64(2*tc.p))
				for i := range tc.p {
					load[i] += sparse.LowerBound(v.Indices, eq[i+1]) - sparse.LowerBound(v.Indices, eq[i])
				}
			}
			busiest := float64(slices.Max(load)) * float64(tc.p) / float64(tc.p*tc.k)
			if got := ag.equalRangesSkewed(dim, tc.p); got != tc.want {
				t.Errorf("skewed %v, want %v: the busiest equal range holds %.2fx the mean share", got, tc.want, busiest)
			}
			if tc.want && busiest < 1.5 {
				t.Errorf("the busiest equal range holds %.2fx the mean share: the case is not skewed", busiest)
			}
			t.Logf("busiest equal range: %.2fx the mean share", busiest)
		})
	}
}
