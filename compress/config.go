package compress

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrInvalid is wrapped by every error about a bad configuration or
// argument.
var ErrInvalid = errors.New("compress: invalid argument")

// Method is how the entries to send are chosen.
type Method uint8

// Selection methods.
const (
	// Exact selects the k entries of largest magnitude exactly (ties to
	// the lower index), in two passes over the input.
	Exact Method = iota
	// Sampled estimates the threshold from a random sample and sends
	// everything at or above it, as Deep Gradient Compression does: one
	// pass when the estimate is good, the count within Tolerance of k.
	Sampled
	// Reuse keeps the exact threshold for ReuseSteps steps, as Ok-Topk
	// does: one pass per step between exact recomputations.
	Reuse
	// Random selects k entries uniformly at random, the same ones on every
	// rank of a job (the seed is shared), so their sum stays at k entries.
	Random
)

var methodNames = [...]string{Exact: "exact", Sampled: "sampled", Reuse: "reuse", Random: "random"}

func (m Method) String() string {
	if int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// ParseMethod parses a method name as printed by Method.String.
func ParseMethod(s string) (Method, error) {
	for i, n := range methodNames {
		if strings.EqualFold(s, n) {
			return Method(i), nil
		}
	}
	return Exact, fmt.Errorf("%w: unknown selection method %q (want %s)", ErrInvalid, s, strings.Join(methodNames[:], ", "))
}

// Defaults of Config: a zero field means its default.
const (
	DefaultDensity        = 0.01
	DefaultSampleFraction = 0.001
	DefaultTolerance      = 0.2
	DefaultAdjustments    = 3
	DefaultReuseSteps     = 32
	// WarmupStartDensity is the density of the first warm-up epoch.
	WarmupStartDensity = 0.25
)

// Config is everything a Sparsifier does locally: how much it sends, how
// it chooses, and what it keeps. The zero value is exact top-k of 1% of
// the whole buffer with error feedback.
type Config struct {
	// Density is the fraction of entries sent per step once warm-up is
	// over, in (0, 1]: k = ceil(Density*n) per layer. Default 0.01.
	Density float64
	// WarmupEpochs, when positive, starts at WarmupStartDensity and
	// lowers the density exponentially to Density over that many
	// epochs, as Deep Gradient Compression does (see WarmupDensity).
	WarmupEpochs float64

	// Method chooses the entries; default Exact.
	Method Method
	// SampleFraction is the fraction of entries Sampled draws (at least
	// 1024 of them, and at least 100/density so that the estimate is
	// good; when that is a quarter of the layer, Sampled selects
	// exactly instead). Default 0.001: DGC samples 0.1% to 1%, and on a
	// CPU every sampled entry is a cache miss, so the larger samples
	// cost a good part of a pass (BenchmarkSampled).
	SampleFraction float64
	// Tolerance is how far a threshold's count may miss k before Sampled
	// and Reuse correct it: counts in [k(1-Tolerance), k(1+Tolerance)]
	// are sent as they are. Default 0.2.
	Tolerance float64
	// Adjustments is how many corrected thresholds Sampled tries before
	// falling back to Exact. Default 3.
	Adjustments int
	// ReuseSteps is how many steps Reuse keeps a threshold: it recomputes
	// it exactly every ReuseSteps steps. Default 32.
	ReuseSteps int
	// Seed seeds Sampled's samples and Random's choices; every step and
	// layer draws its own stream from it. Give every rank the same seed
	// (Random relies on it to choose the same entries everywhere).
	Seed uint64

	// NoErrorFeedback sends the selected entries of the gradient and
	// drops the rest, instead of keeping them in a residual added to the
	// next step's gradient. Only for ablations: below a few percent
	// density, training without error feedback usually loses accuracy.
	NoErrorFeedback bool
	// Momentum, when positive, applies Deep Gradient Compression's
	// momentum correction with this coefficient (0.9 is usual): the
	// residual accumulates the velocity u = Momentum*u + g rather than g,
	// so the entries sent are the momentum SGD update and the optimizer
	// must apply them with plain SGD. Needs error feedback.
	Momentum float64
	// NoMomentumMasking keeps the velocity of the entries just sent,
	// instead of clearing it (DGC's momentum-factor masking, on by
	// default with Momentum).
	NoMomentumMasking bool

	// LayerSizes, when given, splits the buffer into consecutive layers
	// of these sizes (summing to its length), and k is chosen and the
	// entries selected in every layer separately. Nil: one selection over
	// the whole buffer.
	LayerSizes []int
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Density == 0 {
		c.Density = DefaultDensity
	}
	if c.SampleFraction == 0 {
		c.SampleFraction = DefaultSampleFraction
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.Adjustments == 0 {
		c.Adjustments = DefaultAdjustments
	}
	if c.ReuseSteps == 0 {
		c.ReuseSteps = DefaultReuseSteps
	}
	return c
}

// validate checks c (defaults applied) for a buffer of n entries.
func (c *Config) validate(n int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case n < 0 || n > MaxLen:
		return bad("buffer length %d outside [0, %d]", n, MaxLen)
	case !(c.Density > 0 && c.Density <= 1):
		return bad("density %v outside (0, 1]", c.Density)
	case !(c.WarmupEpochs >= 0) || math.IsInf(c.WarmupEpochs, 1):
		return bad("warm-up epochs %v: want a finite number >= 0", c.WarmupEpochs)
	case int(c.Method) >= len(methodNames):
		return bad("selection %v", c.Method)
	case !(c.SampleFraction > 0 && c.SampleFraction <= 1):
		return bad("sample fraction %v outside (0, 1]", c.SampleFraction)
	case !(c.Tolerance > 0 && c.Tolerance < 1):
		return bad("tolerance %v outside (0, 1)", c.Tolerance)
	case c.Adjustments < 0:
		return bad("adjustments %d < 0", c.Adjustments)
	case c.ReuseSteps < 1:
		return bad("reuse steps %d < 1", c.ReuseSteps)
	case !(c.Momentum >= 0 && c.Momentum < 1):
		return bad("momentum %v outside [0, 1)", c.Momentum)
	case c.Momentum > 0 && c.NoErrorFeedback:
		return bad("momentum correction accumulates the velocity in the error-feedback residual: it needs error feedback")
	}
	if c.LayerSizes != nil {
		sum := 0
		for i, s := range c.LayerSizes {
			if s < 0 {
				return bad("layer %d has size %d", i, s)
			}
			sum += s
		}
		if sum != n {
			return bad("layer sizes sum to %d, not the buffer length %d", sum, n)
		}
	}
	return nil
}

// MaxLen is the longest buffer: indices are uint32.
const MaxLen = math.MaxUint32

// WarmupDensity is Deep Gradient Compression's density warm-up: at epoch
// e (a fraction counts: pass whole epochs for DGC's steps, or the exact
// progress for a smooth decay) of w warm-up epochs it is
// WarmupStartDensity*(target/WarmupStartDensity)^(e/w), falling
// exponentially from 25% to target, and target from epoch w on (and when
// target is above 25% or w is not positive). With target 0.001 over 4
// epochs it gives DGC's 25%, 6.3%, 1.6%, 0.4%, 0.1%.
func WarmupDensity(target, epoch, w float64) float64 {
	if w <= 0 || epoch >= w || target >= WarmupStartDensity {
		return target
	}
	epoch = max(epoch, 0)
	return WarmupStartDensity * math.Pow(target/WarmupStartDensity, epoch/w)
}

// SelectCount is the number of entries to send from n at density d:
// ceil(d*n), so that every nonempty layer sends at least one (computed
// so that a product like 0.07*100, 7.000000000000001 in floating point,
// still gives 7).
func SelectCount(n int, d float64) int {
	x := d * float64(n)
	return min(n, int(math.Ceil(x-1e-9*max(1, x))))
}
