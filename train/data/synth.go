package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Synth describes generated sparse binary-classification data in the
// manner of the URL and webspam sets: feature frequencies follow a power
// law (feature of popularity rank k is drawn with probability
// proportional to k^-Exponent), its popularity order is scattered over
// the index range by a fixed permutation, every sample holds about NNZ
// distinct features with values scaled to unit norm, and labels come from
// a planted linear model plus noise: the Informative most popular
// features have standard normal weights, the rest none (as in real data,
// where the rare features are mostly noise to a linear model). Sample i
// is generated from (Seed, i) alone, so a rank generates only its own
// samples and any number of ranks see the same data.
type Synth struct {
	Name     string
	Dim      int
	NNZ      int
	Samples  int     // training samples; a tenth as many more form the test set
	Exponent float64 // power law of feature popularity
	Binary   bool    // all values of a sample equal (URL's features are indicators)
	Noise    float64 // standard deviation of the noise added to the planted margin
	// Informative is the number of features, the most popular, that the
	// planted model weighs (0: all).
	Informative int
	Seed        uint64
}

// SynthURL is URL-like data: the URL set's 3,231,961 features, about 100
// indicator features per sample.
func SynthURL() Synth {
	return Synth{Name: "synthetic:url", Dim: 3231961, NNZ: 100, Samples: 200000, Exponent: 1.1, Binary: true, Noise: 0.3, Informative: 20000}
}

// SynthWebspam is webspam-like data: the webspam trigram set's 16,609,143
// features, real-valued, 400 per sample by default (the published set
// averages far more; NNZ sets it).
func SynthWebspam() Synth {
	return Synth{Name: "synthetic:webspam", Dim: 16609143, NNZ: 400, Samples: 100000, Exponent: 1.05, Noise: 0.3, Informative: 50000}
}

// TestSamples is the size of the generated test set.
func (g Synth) TestSamples() int { return max(1, g.Samples/10) }

func (g Synth) check() error {
	if g.Dim < 1 || g.Dim > math.MaxUint32 || g.NNZ < 1 || g.NNZ > g.Dim || g.Samples < 1 || g.Exponent <= 0 {
		return fmt.Errorf("%s: bad parameters: %d features, %d nonzeros per sample, %d samples, exponent %g", g.Name, g.Dim, g.NNZ, g.Samples, g.Exponent)
	}
	return nil
}

// Generate returns this rank's shards of the training and test sets.
func (g Synth) Generate(o Options) (train, test *Set, err error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	if err := g.check(); err != nil {
		return nil, nil, err
	}
	n := g.Samples
	if o.Limit > 0 {
		n = min(n, o.Limit)
	}
	t := max(1, n/10)
	train = g.generate(g.Name, 0, n, o)
	test = g.generate(g.Name+" (test)", n, t, o)
	return train, test, nil
}

// generate makes samples first+[rank's part of count].
func (g Synth) generate(name string, first, count int, o Options) *Set {
	lo, hi := first+count*o.Rank/o.Size, first+count*(o.Rank+1)/o.Size
	s := &Set{Name: name, Dim: g.Dim, Classes: 2, RowPtr: make([]int, 1, hi-lo+1),
		Labels: make([]int32, 0, hi-lo), Pos: make([]int64, 0, hi-lo)}
	s.Idx = make([]uint32, 0, (hi-lo)*g.NNZ)
	s.Val = make([]float32, 0, (hi-lo)*g.NNZ)
	perm := newPermutation(g.Dim, g.Seed)
	threshold := g.threshold()
	var pcg rand.PCG
	rng := rand.New(&pcg)
	ranks := make([]uint32, 0, 2*g.NNZ)
	feats := make([]feature, 0, 2*g.NNZ)
	for i := lo; i < hi; i++ {
		pcg.Seed(g.Seed, uint64(i))
		ranks = g.draw(rng, ranks[:0])
		feats = feats[:0]
		for _, k := range ranks {
			feats = append(feats, feature{index: perm.at(int(k)), rank: k})
		}
		slices.SortFunc(feats, func(a, b feature) int { return int(a.index) - int(b.index) })
		start := len(s.Val)
		for _, f := range feats {
			v := 1.0
			if !g.Binary {
				v = 0.1 + rng.Float64()
			}
			s.Idx = append(s.Idx, f.index)
			s.Val = append(s.Val, float32(v))
		}
		margin := g.margin(feats, s.Val[start:])
		label := int32(0)
		if margin+g.Noise*rng.NormFloat64() > threshold {
			label = 1
		}
		s.RowPtr = append(s.RowPtr, len(s.Idx))
		s.Labels = append(s.Labels, label)
		s.Pos = append(s.Pos, int64(i))
	}
	s.Locate = func(i int64) string { return fmt.Sprintf("%s sample %d", g.Name, i) }
	return s
}

// margin scales vals to unit norm and returns the planted model's
// margin of the sample.
func (g Synth) margin(feats []feature, vals []float32) float64 {
	var norm, m float64
	for _, v := range vals {
		norm += float64(v) * float64(v)
	}
	scale := 1 / math.Sqrt(norm)
	for j, f := range feats {
		v := float64(vals[j]) * scale
		vals[j] = float32(v)
		if g.Informative <= 0 || int(f.rank) < g.Informative {
			m += v * plantedWeight(g.Seed, f.rank)
		}
	}
	return m
}

// threshold is the median margin of probe samples drawn like the data
// (the same on every rank), so that the classes are balanced: the most
// popular features are in nearly every sample, and their weights would
// otherwise shift every margin alike.
func (g Synth) threshold() float64 {
	const probes = 1001
	var pcg rand.PCG
	rng := rand.New(&pcg)
	margins := make([]float64, probes)
	var ranks []uint32
	var feats []feature
	var vals []float32
	for i := range margins {
		pcg.Seed(g.Seed^0x7072, uint64(i))
		ranks = g.draw(rng, ranks[:0])
		feats, vals = feats[:0], vals[:0]
		for _, k := range ranks {
			feats = append(feats, feature{rank: k})
			v := float32(1)
			if !g.Binary {
				v = float32(0.1 + rng.Float64())
			}
			vals = append(vals, v)
		}
		margins[i] = g.margin(feats, vals)
	}
	slices.Sort(margins)
	return margins[probes/2]
}

// feature is a drawn feature: its index and its popularity rank.
type feature struct{ index, rank uint32 }

// draw returns the popularity ranks of about NNZ distinct features,
// sorted.
func (g Synth) draw(rng *rand.Rand, out []uint32) []uint32 {
	e := 1 - g.Exponent
	top := math.Pow(float64(g.Dim)+1, e) - 1
	for tries := 0; len(out) < g.NNZ && tries < 4; tries++ {
		for range g.NNZ - len(out) {
			// Inverse of the continuous power law's distribution.
			var x float64
			if math.Abs(e) < 1e-9 {
				x = math.Exp(rng.Float64() * math.Log(float64(g.Dim)+1))
			} else {
				x = math.Pow(top*rng.Float64()+1, 1/e)
			}
			out = append(out, uint32(min(max(int(x)-1, 0), g.Dim-1)))
		}
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

// plantedWeight is the planted model's weight of the feature of
// popularity rank f: a standard normal drawn from (seed, f).
func plantedWeight(seed uint64, f uint32) float64 {
	u1 := unitHash(seed^0x5eed, uint64(f)*2+1)
	u2 := unitHash(seed^0x5eed, uint64(f)*2+2)
	return math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2)
}

// permutation is k -> (a*k + c) mod n with a coprime to n: a bijection
// of [0, n) that scatters popular features over the index range.
type permutation struct{ a, c, n uint64 }

func newPermutation(n int, seed uint64) permutation {
	a := uint64(2654435761) % uint64(n)
	if a == 0 {
		a = 1
	}
	for gcd(a, uint64(n)) != 1 {
		a++
	}
	return permutation{a: a, c: seed % uint64(n), n: uint64(n)}
}

func (p permutation) at(k int) uint32 { return uint32((p.a*uint64(k) + p.c) % p.n) }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
