package compress

import "math"

// Gradient clipping by global norm, in the form Deep Gradient Compression
// applies it before accumulation: every rank computes its gradient's
// squared norm, the ranks average them (an allreduce: the caller's job,
// which owns the network), and every rank scales its gradient by the
// same factor:
//
//	sq := compress.SquaredNorm(grad)
//	... mean of sq over the ranks ...
//	compress.Scale(grad, compress.ClipFactor(mean, maxNorm))

// SquaredNorm is the sum of the squares of x, accumulated in float64.
func SquaredNorm[T Float](x []T) float64 {
	var s0, s1 float64
	i := 0
	for ; i+2 <= len(x); i += 2 {
		a, b := float64(x[i]), float64(x[i+1])
		s0 += a * a
		s1 += b * b
	}
	if i < len(x) {
		a := float64(x[i])
		s0 += a * a
	}
	return s0 + s1
}

// ClipFactor is the factor that brings a gradient of squared norm sq down
// to maxNorm: maxNorm/(sqrt(sq)+1e-6) when that is below 1, else 1 (the
// small term keeps a zero norm finite, as in PyTorch's clip_grad_norm_).
// A non-finite sq gives 1: clipping cannot repair a NaN or Inf gradient,
// and leaving it visible lets a loss scaler skip the step.
func ClipFactor(sq, maxNorm float64) float64 {
	if maxNorm <= 0 || math.IsNaN(sq) || math.IsInf(sq, 0) {
		return 1
	}
	return min(1, maxNorm/(math.Sqrt(sq)+1e-6))
}

// Scale multiplies x by f in place (nothing when f is 1).
func Scale[T Float](x []T, f float64) {
	if f == 1 {
		return
	}
	t := T(f)
	for i := range x {
		x[i] *= t
	}
}
