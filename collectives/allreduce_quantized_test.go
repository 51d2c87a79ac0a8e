package collectives_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport"
)

// quantTimeout bounds every quantized run (a hang is a bug); generous
// because the machine is shared and the race detector slows the codecs.
const quantTimeout = 60 * time.Second

// eps32 is float32's unit roundoff: every rounding to float32 (of a
// float64 input by Encode64, of a decoded level, of a float32 addition)
// moves a value by at most eps32 times its magnitude.
const eps32 = 0x1p-24

// quantInput returns rank's seeded input: normal values whose magnitudes
// span 10^-4 .. 10^1.5, so fp16 sees subnormals, buckets mix large and
// small values, and sums over six ranks stay far below fp16's 65504.
func quantInput[T collectives.Float](seed uint64, rank, n int) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	out := make([]T, n)
	for i := range out {
		out[i] = T(rng.NormFloat64() * math.Pow(10, -4+5.5*rng.Float64()))
	}
	return out
}

// quantRef holds, per element, the exact sum S of the inputs (in float64,
// whose rounding is far below every bound used), the sum of magnitudes, and
// per rank the largest magnitude of its input.
type quantRef struct {
	sum, abs []float64
	maxAbs   []float64 // per rank, of the input rounded to float32
	maxSum   float64   // largest |S|
}

func newQuantRef[T collectives.Float](inputs [][]T) quantRef {
	n := len(inputs[0])
	ref := quantRef{sum: make([]float64, n), abs: make([]float64, n), maxAbs: make([]float64, len(inputs))}
	for r, in := range inputs {
		for i, v := range in {
			ref.sum[i] += float64(v)
			ref.abs[i] += math.Abs(float64(v))
			ref.maxAbs[r] = max(ref.maxAbs[r], math.Abs(float64(float32(v))))
		}
	}
	for _, s := range ref.sum {
		ref.maxSum = max(ref.maxSum, math.Abs(s))
	}
	return ref
}

// quantResult is one QuantizedAllreduce run: every rank's input, result,
// error and transport counters.
type quantResult[T collectives.Float] struct {
	inputs, outputs [][]T
	errs            []error
	stats           []transport.Stats
}

// rankCodec returns the codec rank uses: kind with a seed that differs per
// rank and per trial, as the documentation asks.
func rankCodec(kind quant.Kind, bucket int, seed uint64, rank int) (quant.Codec, error) {
	return quant.New(kind, quant.Options{BucketSize: bucket, Seed: seed*1_000_003 + uint64(rank)})
}

// codecFor is rankCodec for the test's goroutine.
func codecFor(t testing.TB, kind quant.Kind, bucket int, seed uint64, rank int) quant.Codec {
	c, err := rankCodec(kind, bucket, seed, rank)
	require.NoError(t, err)
	return c
}

// quantRun describes one QuantizedAllreduce run.
type quantRun struct {
	p, n      int
	kind      quant.Kind
	bucket    int                  // 0: quant's default
	seed      uint64               // of the inputs
	codecSeed uint64               // of the ranks' codecs
	seg       int                  // segment size; 0: the default
	red       collectives.ReduceOp // Sum (the zero value) or Avg
}

// runQuantized runs QuantizedAllreduce on p ranks over n elements of
// seeded input.
// checkQuantizedRun asserts a run of q: no errors, bit-identical
// replicas, every element within the codec's bound of the float64 sum of
// the inputs, and each rank's bytes equal to the schedule's prediction.
func checkQuantizedRun(t *testing.T, q quantRun, res quantResult[float32]) {
	t.Helper()
	requireNoErrors(t, res.errs)
	requireIdentical(t, res.outputs)
	ref := newQuantRef(res.inputs)
	bound := func(i int) float64 { return halfBound(q.kind, q.p, ref.abs[i], ref.sum[i]) }
	if q.kind.Stochastic() {
		hard, _, _ := stochasticBounds(q.kind, ref)
		bound = func(int) float64 { return hard }
	}
	for i, got := range res.outputs[0] {
		require.LessOrEqual(t, math.Abs(float64(got)-ref.sum[i]), bound(i), "P%d n %d seg %d %v element %d", q.p, q.n, q.seg, q.kind, i)
	}
	codec := codecFor(t, q.kind, q.bucket, 0, 0)
	for r := range q.p {
		require.Equal(t, uint64(collectives.QuantizedBytesSentSeg(q.n, q.seg, q.p, r, codec)), res.stats[r].BytesSent, "rank %d", r)
	}
}

func runQuantized[T collectives.Float](t testing.TB, q quantRun) quantResult[T] {
	t.Helper()
	res := quantResult[T]{inputs: make([][]T, q.p), outputs: make([][]T, q.p), stats: make([]transport.Stats, q.p)}
	for r := range q.p {
		res.inputs[r] = quantInput[T](q.seed, r, q.n)
	}
	codecs := make([]quant.Codec, q.p)
	for r := range codecs {
		codecs[r] = codecFor(t, q.kind, q.bucket, q.codecSeed, r)
	}
	res.errs = coltest.Run(t, q.p, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
		data := make([]T, q.n)
		copy(data, res.inputs[r])
		codec := codecs[r]
		var err error
		if q.seg > 0 {
			err = collectives.QuantizedAllreduceSeg(op, data, q.red, codec, q.seg)
		} else {
			err = collectives.QuantizedAllreduce(op, data, q.red, codec)
		}
		res.outputs[r], res.stats[r] = data, tr.Stats()
		return err
	})
	return res
}

// requireIdentical checks that every rank holds bit-for-bit rank 0's result.
func requireIdentical[T collectives.Float](t *testing.T, outputs [][]T) {
	t.Helper()
	for r := 1; r < len(outputs); r++ {
		for i := range outputs[0] {
			a, b := float64(outputs[0][i]), float64(outputs[r][i])
			if math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("element %d: rank 0 has %v, rank %d has %v", i, a, r, b)
			}
		}
	}
}

var quantKinds = []quant.Kind{quant.None, quant.FP16, quant.BF16, quant.Q8, quant.Q4, quant.Q2}

// quantLengths are the vector lengths tried for p ranks: empty, one
// element, fewer than p, and vectors of about 10k and 100k elements (odd,
// so blocks and buckets are uneven).
func quantLengths(p int) []int {
	return []int{0, 1, max(p-1, 1), 10_007, 100_003}
}

// halfParams returns the unit roundoff u and the absolute error eta of one
// rounding of a deterministic codec: |fl(x) - x| <= u|x| + eta (eta covers
// fp16's subnormal range, where the spacing is 2^-24, and bfloat16's).
func halfParams(kind quant.Kind) (u, eta float64) {
	switch kind {
	case quant.FP16:
		return 0x1p-11, 0x1p-25
	case quant.BF16:
		return 0x1p-8, 0x1p-134
	}
	return 0, 0 // none: exact for float32; float64's rounding is in eps32
}

// halfBound is the error bound of element i for a deterministic codec.
// The owner's sum A adds its exact value and P-1 contributions each
// rounded once (u|x| + eta), with P-1 float32 additions (eps32 each, of
// partial sums no larger than sum|x| (1+u)); float64 inputs add one
// rounding to float32 per value (eps32). The result rounds A once more:
// u|A| + eta with |A| <= |S| + |A - S|. Collected:
//
//	|result - S| <= (u + u^2 + 2 P eps32) sum|x| + (u + 2 eps32) |S| + 2 P eta
func halfBound(kind quant.Kind, p int, absSum, sum float64) float64 {
	u, eta := halfParams(kind)
	P := float64(p)
	return (u+u*u+2*P*eps32)*absSum + (u+2*eps32)*math.Abs(sum) + 2*P*eta + 0x1p-149
}

func TestQuantizedAllreduceHalf(t *testing.T) {
	for p := 1; p <= 6; p++ {
		for _, kind := range []quant.Kind{quant.None, quant.FP16, quant.BF16} {
			t.Run(fmt.Sprintf("P%d/%v", p, kind), func(t *testing.T) {
				for _, n := range quantLengths(p) {
					checkHalf[float32](t, p, n, kind)
					if n < 100_000 { // float64 shares the kernels; spare the race detector
						checkHalf[float64](t, p, n, kind)
					}
				}
			})
		}
	}
}

func checkHalf[T collectives.Float](t *testing.T, p, n int, kind quant.Kind) {
	t.Helper()
	seed := uint64(p*7919 + n*31 + int(kind))
	res := runQuantized[T](t, quantRun{p: p, n: n, kind: kind, seed: seed, codecSeed: seed})
	requireNoErrors(t, res.errs)
	requireIdentical(t, res.outputs)
	if p == 1 {
		require.Equal(t, res.inputs[0], res.outputs[0], "one rank: data unchanged")
		return
	}
	ref := newQuantRef(res.inputs)
	for i, got := range res.outputs[0] {
		bound := halfBound(kind, p, ref.abs[i], ref.sum[i])
		if err := math.Abs(float64(got) - ref.sum[i]); !(err <= bound) {
			t.Fatalf("%T n=%d element %d: got %v, want %v within %v (error %v)", got, n, i, got, ref.sum[i], bound, err)
		}
	}
}

// stochasticBounds returns, for a stochastic codec with s levels, a hard
// bound on every element's error, the sum C of the squared widths of the
// stochastic roundings that make up one element's error, and the slack of
// its float32 roundings. A stochastic rounding with step h takes one of two
// values h apart, and each contribution j has steps of at most M_j/s (M_j
// its largest magnitude bounds the scale of every bucket of it); so the
// owner's sum A is within H1 = sum_j M_j/s of S, its buckets' scales are at
// most max|S| + H1, and the final rounding has step at most
// H2 = (max|S| + H1)/s. Float32 roundings (decoded levels, additions,
// float64 inputs) move the result by at most slack. (Sums over all P ranks
// bound the P-1 contributions that are quantized.)
func stochasticBounds(kind quant.Kind, ref quantRef) (hard, widthSq, slack float64) {
	s := float64(int(1)<<(kind.Bits()-1) - 1)
	var h1, m, sq float64
	for _, mj := range ref.maxAbs {
		h1 += mj / s
		m += mj
		sq += (mj / s) * (mj / s)
	}
	h2 := (ref.maxSum + h1) / s
	P := float64(len(ref.maxAbs))
	slack = 4 * (P + 3) * eps32 * (m + ref.maxSum + h1)
	return h1 + h2 + slack, sq + h2*h2, slack
}

func TestQuantizedAllreduceStochastic(t *testing.T) {
	for p := 1; p <= 6; p++ {
		for _, kind := range []quant.Kind{quant.Q8, quant.Q4, quant.Q2} {
			t.Run(fmt.Sprintf("P%d/%v", p, kind), func(t *testing.T) {
				for _, n := range quantLengths(p) {
					checkStochastic[float32](t, p, n, kind)
					if n < 100_000 {
						checkStochastic[float64](t, p, n, kind)
					}
				}
			})
		}
	}
}

// checkStochastic runs one stochastic allreduce and checks the hard bound
// on every element and that the replicas are identical.
func checkStochastic[T collectives.Float](t *testing.T, p, n int, kind quant.Kind) {
	t.Helper()
	seed := uint64(p*7919 + n*31 + int(kind))
	res := runQuantized[T](t, quantRun{p: p, n: n, kind: kind, seed: seed, codecSeed: seed})
	requireNoErrors(t, res.errs)
	requireIdentical(t, res.outputs)
	if p == 1 || n == 0 {
		require.Equal(t, res.inputs[0], res.outputs[0])
		return
	}
	ref := newQuantRef(res.inputs)
	hard, _, _ := stochasticBounds(kind, ref)
	for i, got := range res.outputs[0] {
		if err := math.Abs(float64(got) - ref.sum[i]); !(err <= hard) {
			t.Fatalf("%T n=%d element %d: got %v, want %v within %v (error %v)", got, n, i, got, ref.sum[i], hard, err)
		}
	}
}

// TestQuantizedAllreduceSegments cuts blocks into many messages (segments
// of 1, 7 and 100 elements, buckets of 64 that segments cut short), and
// checks results, identical replicas and the byte prediction.
func TestQuantizedAllreduceSegments(t *testing.T) {
	for _, p := range []int{2, 3, 5} {
		for _, seg := range []int{1, 7, 100} {
			for _, kind := range []quant.Kind{quant.FP16, quant.Q4} {
				n := 1000 + p
				if seg == 1 {
					n = 97
				}
				q := quantRun{p: p, n: n, kind: kind, bucket: 64, seed: uint64(seg), codecSeed: 5, seg: seg}
				checkQuantizedRun(t, q, runQuantized[float32](t, q))
			}
		}
	}
}

// TestQuantizedAllreduceUnbiased repeats the allreduce of one fixed input
// with fresh codec seeds and checks that the mean result converges to the
// exact sum. The error of a result is a sum of stochastic roundings, each
// of mean zero given everything drawn before it (contributions first, then
// the final rounding, whose step depends on them) and each confined to an
// interval as wide as its step: a martingale, to which the Azuma-Hoeffding
// inequality applies with the widths of stochasticBounds (C per element
// and trial). So, except with probability delta,
//
//	per element:   |mean_i - S_i| <= sqrt(C ln(2N/delta) / (2T)) + slack
//	all elements:  |mean over i of w_i (mean_i - S_i)| <= sqrt(C ln(4/delta) / (2TN)) + slack
//
// for T trials, N elements and weights w = 1 and w = sign(S) (the latter
// catches a shrinkage towards zero, such as rounding down, which a plain
// sum could average away). The aggregate bound is sqrt(N) times tighter:
// it catches results shrunk by 0.5% for q4 (checked by mutation).
func TestQuantizedAllreduceUnbiased(t *testing.T) {
	const (
		p      = 4
		n      = 2500 // blocks of 625: with buckets of 256, two full and one partial
		bucket = 256
		trials = 400
		delta  = 1e-6
	)
	for _, kind := range []quant.Kind{quant.Q8, quant.Q4, quant.Q2} {
		t.Run(kind.String(), func(t *testing.T) {
			checkUnbiased[float32](t, p, n, bucket, trials, delta, kind)
			if kind == quant.Q4 {
				checkUnbiased[float64](t, p, n, bucket, trials, delta, kind)
			}
		})
	}
}

func checkUnbiased[T collectives.Float](t *testing.T, p, n, bucket, trials int, delta float64, kind quant.Kind) {
	inputs := make([][]T, p)
	for r := range inputs {
		rng := rand.New(rand.NewPCG(99, uint64(r)))
		inputs[r] = make([]T, n)
		for i := range inputs[r] {
			inputs[r][i] = T(rng.NormFloat64())
		}
	}
	// Every trial is one operation (sequence number trial+1) of the same
	// job, each rank with a codec seeded for that trial.
	sums := make([][]float64, p)
	errs := coltest.Run(t, p, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		sums[r] = make([]float64, n)
		data := make([]T, n)
		for trial := range trials {
			copy(data, inputs[r])
			op := coltest.NewOp(ctx, tr, uint64(trial+1), transport.Desc{})
			codec, err := rankCodec(kind, bucket, uint64(trial), r)
			if err != nil {
				return err
			}
			if err := collectives.QuantizedAllreduce(op, data, collectives.Sum, codec); err != nil {
				return err
			}
			for i, v := range data {
				sums[r][i] += float64(v)
			}
		}
		return nil
	})
	requireNoErrors(t, errs)
	ref := newQuantRef(inputs)
	_, widthSq, slack := stochasticBounds(kind, ref)
	nt, nn := float64(trials), float64(n)
	perElement := math.Sqrt(widthSq*math.Log(2*nn/delta)/(2*nt)) + slack
	aggregate := math.Sqrt(widthSq*math.Log(4/delta)/(2*nt*nn)) + slack
	worst, plain, signed, meanAbs := 0.0, 0.0, 0.0, 0.0
	for i := range n {
		dev := sums[0][i]/nt - ref.sum[i]
		worst = max(worst, math.Abs(dev)/perElement)
		require.LessOrEqual(t, math.Abs(dev), perElement, "%T element %d: mean %v over %d trials, exact %v",
			T(0), i, sums[0][i]/nt, trials, ref.sum[i])
		plain += dev / nn
		if ref.sum[i] < 0 {
			signed -= dev / nn // positive when results are too large in magnitude
		} else {
			signed += dev / nn
		}
		meanAbs += math.Abs(ref.sum[i]) / nn
	}
	require.LessOrEqual(t, math.Abs(plain), aggregate, "mean error over all elements")
	require.LessOrEqual(t, math.Abs(signed), aggregate, "mean error towards |S| over all elements")
	t.Logf("%v %T: mean |S| %.3g; per-element bound %.3g (worst at %.2f of it); aggregate bound %.3g (errors %.2g, %.2g towards |S|)",
		kind, T(0), meanAbs, perElement, worst, aggregate, plain, signed)
}

// TestQuantizedAllreduceBytes checks each rank's payload bytes, counted by
// the transport, against QuantizedAllreduceBytesSent, and the compression
// against float32. Rank r sends e = (n - |block r|) + (P-1)|block r|
// values, which a float32 exchange would carry in 4e bytes; a codec of b
// bits puts e*b/8 bytes on the wire, plus for the stochastic kinds one
// 4-byte scale per bucket of B and, per bucket, under a byte of padding:
// e(b/8 + 4/B) <= bytes <= e(b/8 + 5/B) + 5 per message (its partial
// bucket). Summed over ranks the values equal a ring allreduce's.
func TestQuantizedAllreduceBytes(t *testing.T) {
	type tc struct{ p, n int }
	cases := []tc{{3, 100_003}, {6, 100_003}, {4, 10_007}, {5, 1001}, {2, 300_007}}
	for _, c := range cases {
		for _, kind := range quantKinds {
			t.Run(fmt.Sprintf("P%d/n%d/%v", c.p, c.n, kind), func(t *testing.T) {
				checkBytes[float32](t, c.p, c.n, kind)
				if c.n == 300_007 {
					// Blocks of 150004 take 2 segments of float32, 3 of float64.
					checkBytes[float64](t, c.p, c.n, kind)
				}
			})
		}
	}
}

func checkBytes[T collectives.Float](t *testing.T, p, n int, kind quant.Kind) {
	res := runQuantized[T](t, quantRun{p: p, n: n, kind: kind, seed: 3, codecSeed: 3})
	requireNoErrors(t, res.errs)
	elemSize := collectives.DTypeOf[T]().Size()
	codec := codecFor(t, kind, 0, 0, 0)
	b := float64(kind.Bits())
	var values, ringBytes int64
	for r := range p {
		got := int64(res.stats[r].BytesSent)
		require.Equal(t, collectives.QuantizedAllreduceBytesSent(n, elemSize, p, r, codec), got, "rank %d", r)
		lo, hi := blockBounds(n, p, r)
		e := float64(n - (hi - lo) + (p-1)*(hi-lo))
		if !kind.Stochastic() {
			require.Equal(t, e*b/8, float64(got), "rank %d", r)
		} else {
			const bucket = float64(quant.DefaultBucketSize)
			msgs := float64(res.stats[r].MsgsSent)
			require.GreaterOrEqual(t, float64(got), e*(b/8+4/bucket), "rank %d", r)
			require.LessOrEqual(t, float64(got), e*(b/8+5/bucket)+5*msgs, "rank %d", r)
		}
		if r == 0 {
			t.Logf("rank 0 sends %d bytes: %.2fx less than float32 (%d bits per value)", got, 4*e/float64(got), kind.Bits())
		}
		values += int64(e)
		ringBytes += collectives.AllreduceBytesSent(collectives.AlgoRing, n, 4, p, r)
	}
	require.Equal(t, ringBytes, 4*values, "values sent in all: a float32 ring's")
}

// blockBounds returns rank r's block of n elements split over p ranks, the
// first n%p blocks one longer.
func blockBounds(n, p, r int) (lo, hi int) {
	q, rem := n/p, n%p
	lo = r*q + min(r, rem)
	hi = lo + q
	if r < rem {
		hi++
	}
	return lo, hi
}

// TestQuantizedAllreduceCodecMismatch gives one rank a different codec:
// another kind, or the same stochastic kind with other buckets (whose
// streams have the same size here, so only the descriptor can tell). Every
// rank must fail: the ones that see the other descriptor with a mismatch,
// the rest because a peer failed the operation for that mismatch.
func TestQuantizedAllreduceCodecMismatch(t *testing.T) {
	type variant struct {
		name          string
		kind, odd     quant.Kind
		bucket, oddBk int
	}
	for _, v := range []variant{
		{"q4-vs-fp16", quant.Q4, quant.FP16, 0, 0},
		{"fp16-vs-bf16", quant.FP16, quant.BF16, 0, 0},
		{"q8-bucket-300-vs-400", quant.Q8, quant.Q8, 300, 400},
	} {
		t.Run(v.name, func(t *testing.T) {
			const p, n = 4, 2000 // blocks of 500: two buckets of 300 or of 400, equal sizes
			a, b := codecFor(t, v.kind, v.bucket, 0, 0), codecFor(t, v.odd, v.oddBk, 0, 0)
			if v.kind == v.odd {
				require.Equal(t, a.EncodedSize(n/p), b.EncodedSize(n/p), "the bucket variants must have equal stream sizes")
			}
			errs := coltest.Run(t, p, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
				kind, bucket := v.kind, v.bucket
				if tr.Rank() == 2 {
					kind, bucket = v.odd, v.oddBk
				}
				codec, err := rankCodec(kind, bucket, 1, tr.Rank())
				if err != nil {
					return err
				}
				op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
				return collectives.QuantizedAllreduce(op, quantInput[float32](1, tr.Rank(), n), collectives.Sum, codec)
			})
			requireMismatchEverywhere(t, errs)
		})
	}
}

// requireMismatchEverywhere checks that every rank failed because of a
// mismatch, detected by itself or by a peer (whose failure carries its
// code).
func requireMismatchEverywhere(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.ErrorIs(t, err, transport.ErrMismatch, "rank %d: want a mismatch", r)
	}
}

// TestQuantizedAllreduceVersusAllreduce: a rank calling the plain
// Allreduce where the others call QuantizedAllreduce gets a mismatch too.
func TestQuantizedAllreduceVersusAllreduce(t *testing.T) {
	errs := coltest.Run(t, 3, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
		op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
		data := quantInput[float32](1, tr.Rank(), 100)
		if tr.Rank() == 1 {
			_, err := collectives.Allreduce(op, data, collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
			return err
		}
		codec, err := rankCodec(quant.None, 0, 0, tr.Rank())
		if err != nil {
			return err
		}
		return collectives.QuantizedAllreduce(op, data, collectives.Sum, codec)
	})
	requireMismatchEverywhere(t, errs)
}

func TestQuantizedAllreduceInvalid(t *testing.T) {
	errs := coltest.Run(t, 3, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
		op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
		return collectives.QuantizedAllreduce(op, make([]float32, 10), collectives.Sum, nil)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, transport.ErrInvalid, "rank %d", r)
	}
	require.ErrorIs(t, collectives.QuantizedAllreduce[float32](nil, nil, collectives.Sum, nil), transport.ErrInvalid)
}

// TestQuantizedAllreduceDescriptor checks what the descriptor carries:
// every codec kind and bucket size gives its own parameter, so ranks with
// different codecs cannot meet a descriptor they take for theirs.
func TestQuantizedAllreduceDescriptor(t *testing.T) {
	seen := map[uint64]string{}
	distinct := func(c quant.Codec, what string) {
		p := collectives.CodecParam(c)
		if other, dup := seen[p]; dup {
			t.Fatalf("%s and %s share the descriptor parameter %#x", what, other, p)
		}
		seen[p] = what
	}
	for _, kind := range []quant.Kind{quant.None, quant.FP16, quant.BF16} {
		distinct(codecFor(t, kind, 0, 0, 0), kind.String())
	}
	for _, bucket := range []int{1, 2, 3, 7, 8, 9, 63, 64, 65, 1000, 1 << 20, quant.MaxBucketSize - 1, quant.MaxBucketSize} {
		for _, kind := range []quant.Kind{quant.Q8, quant.Q4, quant.Q2} {
			distinct(codecFor(t, kind, bucket, 0, 0), fmt.Sprintf("%v bucket %d", kind, bucket))
		}
	}
	require.Equal(t, collectives.CodecParam(codecFor(t, quant.Q4, 0, 0, 0)), collectives.CodecParam(codecFor(t, quant.Q4, quant.DefaultBucketSize, 5, 6)),
		"the default bucket and the seed")
	var desc transport.Desc
	errs := coltest.Run(t, 2, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
		op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
		codec, err := rankCodec(quant.Q2, 0, 0, tr.Rank())
		if err != nil {
			return err
		}
		err = collectives.QuantizedAllreduce(op, make([]float64, 5), collectives.Sum, codec)
		if tr.Rank() == 0 {
			desc = op.Desc
		}
		return err
	})
	requireNoErrors(t, errs)
	require.Equal(t, "allreduce(dtype=float64 reduce=sum algo=quantized-split count=5 codec=q2 bucket=1024)", collectives.DescString(desc))
	algo, err := collectives.ParseAlgo("quantized-split")
	require.NoError(t, err)
	require.Equal(t, collectives.AlgoQuantizedSplit, algo)
}

// TestQuantizedAllreduceReproducible: equal inputs and seeds give equal
// results, because every rank adds the contributions in a fixed order.
func TestQuantizedAllreduceReproducible(t *testing.T) {
	q := quantRun{p: 5, n: 10_007, kind: quant.Q4, seed: 8, codecSeed: 9}
	a := runQuantized[float32](t, q)
	b := runQuantized[float32](t, q)
	requireNoErrors(t, a.errs)
	requireNoErrors(t, b.errs)
	require.Equal(t, a.outputs, b.outputs)
}

// TestQuantizedAllreduceNonFinite: a NaN in one rank's input poisons its
// bucket on every rank (and nothing else) with the default policy, and
// fails the operation on every rank with NonFiniteReject.
func TestQuantizedAllreduceNonFinite(t *testing.T) {
	const p, n, bucket = 3, 3000, 100
	run := func(policy quant.NonFinitePolicy) ([][]float32, []error) {
		out := make([][]float32, p)
		errs := coltest.Run(t, p, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
			r := tr.Rank()
			data := quantInput[float32](4, r, n)
			if r == 1 {
				data[150] = float32(math.NaN()) // block 0, its second bucket
			}
			codec, err := quant.New(quant.Q8, quant.Options{BucketSize: bucket, NonFinite: policy, Seed: uint64(r)})
			if err != nil {
				return err
			}
			err = collectives.QuantizedAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), data, collectives.Sum, codec)
			out[r] = data
			return err
		})
		return out, errs
	}
	out, errs := run(quant.NonFinitePoison)
	requireNoErrors(t, errs)
	for r := range p {
		for i, v := range out[r] {
			require.Equal(t, i >= 100 && i < 200, math.IsNaN(float64(v)), "rank %d element %d = %v", r, i, v)
		}
	}
	_, errs = run(quant.NonFiniteReject)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
	var nf *quant.NonFiniteError
	require.ErrorAs(t, errs[1], &nf)
}

// BenchmarkQuantizedAllreduce runs 16M float32 on 4 in-memory ranks,
// quantized with none, fp16 and q4, against the plain ring Allreduce. Each
// iteration first restores the input (so values neither grow nor overflow
// fp16), a copy that every variant pays alike. Bytes per second are of the
// float32 vector reduced; sent-B/op is what rank 0 puts on the wire. The
// in-memory "network" is a memcpy, so this measures the codecs' CPU cost,
// not the bandwidth they save.
func BenchmarkQuantizedAllreduce(b *testing.B) {
	const p, n = 4, 16 << 20
	inputs := make([][]float32, p)
	for r := range inputs {
		inputs[r] = quantInput[float32](1, r, n)
	}
	data := make([][]float32, p)
	for r := range data {
		data[r] = make([]float32, n)
	}
	for _, name := range []string{"allreduce-ring", "none", "fp16", "q4"} {
		b.Run(name, func(b *testing.B) {
			codecs := make([]quant.Codec, p)
			if name != "allreduce-ring" {
				kind, err := quant.ParseKind(name)
				require.NoError(b, err)
				for r := range codecs {
					codecs[r] = codecFor(b, kind, 0, 1, r)
				}
			}
			b.SetBytes(4 * n)
			var sent [p]uint64
			b.ResetTimer()
			errs := coltest.Run(b, p, time.Hour, func(ctx context.Context, tr transport.Transport) error {
				r := tr.Rank()
				pool := &collectives.Buffers{}
				for i := range b.N {
					copy(data[r], inputs[r])
					op := &collectives.Op{Ctx: ctx, T: tr, Comm: 1, Seq: uint64(i + 1), Pool: pool}
					var err error
					if codecs[r] == nil {
						_, err = collectives.Allreduce(op, data[r], collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
					} else {
						err = collectives.QuantizedAllreduce(op, data[r], collectives.Sum, codecs[r])
					}
					if err != nil {
						return err
					}
				}
				sent[r] = tr.Stats().BytesSent
				return nil
			})
			b.StopTimer()
			for r, err := range errs {
				if err != nil {
					b.Fatalf("rank %d: %v", r, err)
				}
			}
			b.ReportMetric(float64(sent[0])/float64(b.N), "sent-B/op")
		})
	}
}
