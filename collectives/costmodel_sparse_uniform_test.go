package collectives

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/quant"
)

// The plans priced in O(P) or O(P log P) (planScatterUniform,
// spPlan.bruck, spPlan.denseRing, spUniform's union of all ranks) against
// the same phases priced message by message: equal to rounding, on equal
// and unequal ranges, uneven counts and every wire.

// spOpaque hides spUniform's type, so planScatterToOwners prices its
// messages one by one.
type spOpaque struct{ spSupports }

func TestSparsePlanUniformMatchesPerMessage(t *testing.T) {
	m := CostModel{Alpha: 20e-6, Beta: 1 / 1.25e9, Gamma: 1 / 4e9, Latency: 5e-6, IndexCodec: 3e-9}
	rng := rand.New(rand.NewSource(3))
	for _, p := range []int{2, 3, 7, 16, 100} {
		for _, dim := range []int{1000, 1<<20 + 3} {
			for _, frac := range []float64{1e-4, 1e-2, 0.3} {
				nnz := make([]int, p)
				for r := range nnz {
					nnz[r] = int(frac * float64(dim) * 2 * rng.Float64())
				}
				bounds := spEqualBounds(dim, p)
				skewed := slices.Clone(bounds)
				for q := 1; q < p; q++ {
					skewed[q] = bounds[q] - rng.Intn(dim/p/2+1)
				}
				for _, w := range []spWire{spWireFor(4, quant.None), spWireFor(4, quant.None).packedWith(m), spWireFor(4, quant.Q4)} {
					for _, b := range [][]int{bounds, skewed} {
						for _, a := range []Algo{AlgoSSARSplitAllgather, AlgoDSAR} {
							fast := spPredict(m, a, p, dim, w, newSpUniform(nnz, dim), b)
							slow := spPredict(m, a, p, dim, w, spOpaque{newSpUniform(nnz, dim)}, b)
							requireSamePrediction(t, fast, slow)
						}
					}
				}
			}
		}
	}
}

func requireSamePrediction(t *testing.T, got, want SparsePrediction) {
	t.Helper()
	if math.Abs(got.Seconds-want.Seconds) > 1e-12*want.Seconds || !slices.Equal(got.BytesSent, want.BytesSent) || !slices.Equal(got.MsgsSent, want.MsgsSent) {
		t.Fatalf("%v: %g s, bytes %v, messages %v; message by message %g s, bytes %v, messages %v",
			want.Algo, got.Seconds, got.BytesSent, got.MsgsSent, want.Seconds, want.BytesSent, want.MsgsSent)
	}
}

// TestSparseBruckAndRingPlansMatchPerMessage: the Bruck allgather's and
// the dense ring's per-rank charges equal those of their messages added
// one by one.
func TestSparseBruckAndRingPlansMatchPerMessage(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, p := range []int{2, 3, 5, 8, 33} {
		size, mem, codec := make([]float64, p), make([]float64, p), make([]float64, p)
		isize := make([]int64, p)
		for r := range p {
			size[r], mem[r], codec[r] = float64(rng.Intn(1<<20)), float64(rng.Intn(1<<21)), rng.Float64()*1e-4
			isize[r] = int64(size[r])
		}
		got, want := newSpPlan(DefaultCostModel, p), newSpPlan(DefaultCostModel, p)
		got.bruck(size, mem, codec, 1.5)
		bruckByMessage(want, size, mem, codec, 1.5)
		requireSamePlan(t, got, want)

		bytes, msgs := spBruckBytesSent(isize)
		for r := range p {
			if float64(bytes[r]) != want.totalSent[r] || msgs[r] != want.msgs[r] {
				t.Fatalf("p=%d rank %d: spBruckBytesSent %d bytes in %d messages, by message %g in %d", p, r, bytes[r], msgs[r], want.totalSent[r], want.msgs[r])
			}
		}

		got, want = newSpPlan(DefaultCostModel, p), newSpPlan(DefaultCostModel, p)
		size[0] = 3 * segmentBytes // several segments
		got.denseRing(size)
		denseRingByMessage(want, size)
		requireSamePlan(t, got, want)
	}
}

func requireSamePlan(t *testing.T, got, want *spPlan) {
	t.Helper()
	if math.Abs(got.seconds-want.seconds) > 1e-12*want.seconds || !slices.Equal(got.msgs, want.msgs) {
		t.Fatalf("p=%d: %g s, messages %v; message by message %g s, messages %v", len(got.msgs), got.seconds, got.msgs, want.seconds, want.msgs)
	}
	for r := range got.totalSent {
		if math.Abs(got.totalSent[r]-want.totalSent[r]) > 1e-9*want.totalSent[r] {
			t.Fatalf("p=%d rank %d: sent %g, message by message %g", len(got.msgs), r, got.totalSent[r], want.totalSent[r])
		}
	}
}

// bruckByMessage is spPlan.bruck adding each block of each message.
func bruckByMessage(pl *spPlan, size, mem, codec []float64, reduceFactor float64) {
	p := len(size)
	for r := range p {
		pl.memSent[r] += mem[r]
		pl.codec[r] += codec[r]
		for d := 1; d < p; d *= 2 {
			to := (r - d + p) % p
			b := 0.0
			for i := range min(d, p-d) {
				q := (r + i) % p
				b += size[q]
				pl.memRecv[to] += mem[q]
				pl.red[to] += mem[q] * reduceFactor
				pl.codec[to] += codec[q]
			}
			pl.msg(r, to, b, 0, 0)
		}
	}
	pl.rounds = ceilLog2(p)
	pl.endPhase()
}

// denseRingByMessage is spPlan.denseRing step by step.
func denseRingByMessage(pl *spPlan, size []float64) {
	p := len(size)
	for r := range p {
		for t := range p - 1 {
			b := size[(r-t+p)%p]
			pl.msg(r, (r+1)%p, b, b, 0)
			pl.phaseMsgs[r] += max(0, int(math.Ceil(b/segmentBytes))-1)
		}
	}
	pl.raw = true
	pl.rounds = p - 1
	pl.endPhase()
}
