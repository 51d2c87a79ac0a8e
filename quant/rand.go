package quant

// Rand is a small, fast, seedable pseudo-random generator (SplitMix64:
// a Weyl sequence passed through a 64-bit mixing function). It passes the
// usual statistical test batteries, which is all stochastic rounding needs;
// it is not cryptographic. The zero Rand is usable (seed 0). A Rand is not
// safe for concurrent use.
type Rand struct {
	state uint64
}

// NewRand returns a generator seeded with seed. Equal seeds give equal
// sequences.
func NewRand(seed uint64) *Rand {
	return &Rand{state: seed}
}

// Seed resets the generator to the sequence of seed.
func (r *Rand) Seed(seed uint64) {
	r.state = seed
}

// Uint64 returns 64 pseudo-random bits.
func (r *Rand) Uint64() uint64 {
	var out uint64
	r.state, out = splitmix64(r.state)
	return out
}

// splitmix64 advances a SplitMix64 state and returns the new state and 64
// random bits. Hot loops keep the state in a local variable.
func splitmix64(state uint64) (uint64, uint64) {
	state += 0x9e3779b97f4a7c15 // 2^64 / golden ratio, odd: full period
	z := state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return state, z ^ z>>31
}

// Float64 returns a uniform value in [0, 1) with 53 random bits.
func (r *Rand) Float64() float64 {
	return float64(r.Uint64()>>11) * 0x1p-53
}
