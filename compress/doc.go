// Package compress is gradient compression for data-parallel training:
// choosing which entries of a gradient to send, and keeping the rest. It
// is pure computation (no communication, no environment): the module's
// root package builds sparcml.Compressor from it, which reduces the
// selected entries across ranks with SparseAllreduce.
//
// Selection (Selector):
//
//   - Exact: the k entries of largest magnitude, in linear time by radix
//     selection on the bits of the magnitudes (two passes over the
//     input), not a sort.
//   - Sampled: Deep Gradient Compression's estimate (Lin et al., ICLR
//     2018): the threshold that selects k*m/n of a random sample of m
//     entries, corrected when the count misses k by more than a
//     tolerance, and exact top-k when corrections fail.
//   - Reuse: Ok-Topk's reused threshold (Li and Hoefler, PPoPP 2022): the
//     exact threshold of one step serves the next ones, recomputed every
//     ReuseSteps steps or when its count misses the tolerance.
//   - Random: k entries uniformly at random from a seed, the same on every
//     rank.
//
// No method selects a zero entry, and all return indices in increasing
// order. The others rank NaN above +Inf (so a NaN is sent, and reaches
// every rank as with a dense allreduce) and break ties at the threshold
// by the lower index. Selection is over the whole buffer or per layer
// (Config.LayerSizes).
//
// State (Sparsifier): error feedback keeps what was not sent and adds it
// to the next step's gradient; momentum correction and momentum-factor
// masking (DGC) accumulate the velocity instead of the gradient; the
// density warm-up falls from 25% to the target over the first epochs
// (WarmupDensity). Clipping by global norm is given as its local parts
// (SquaredNorm, ClipFactor, Scale) since the norm needs an allreduce.
//
// Everything works on float32 and float64 and, once its buffers have
// grown, allocates nothing per step.
package compress
