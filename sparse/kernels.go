package sparse

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/sparcml/sparcml/internal/keyheap"
)

// Add sets dst = a + b. The result is dense when a or b is dense, or when
// the exact union of the supports reaches the switch rule (PreferDense);
// otherwise it is sparse. dst must be a vector distinct from a and b; its
// buffers are reused, so a caller that keeps dst does not allocate once
// the buffers have grown.
func Add[T Float](dst, a, b *Vector[T]) error {
	if err := a.checkShape(); err != nil {
		return err
	}
	if err := b.checkShape(); err != nil {
		return err
	}
	if a.Dim != b.Dim {
		return fmt.Errorf("%w: adding vectors of dimensions %d and %d", ErrInvalid, a.Dim, b.Dim)
	}
	if dst == a || dst == b {
		return fmt.Errorf("%w: Add's destination must differ from its operands", ErrInvalid)
	}
	if a.IsBlock() || b.IsBlock() {
		pair := [2]*Vector[T]{a, b}
		return sumBlocks(dst, pair[:])
	}
	dst.Block = 0
	dim := a.Dim
	switch {
	case a.Dense && b.Dense:
		dst.setDense(dim)
		addDense(dst.Values, a.Values, b.Values)
	case a.Dense:
		dst.setDense(dim)
		copy(dst.Values, a.Values)
		return scatterAdd(dst.Values, b.Indices, b.Values)
	case b.Dense:
		dst.setDense(dim)
		copy(dst.Values, b.Values)
		return scatterAdd(dst.Values, a.Indices, a.Values)
	default:
		pair := [2]*Vector[T]{a, b}
		return sumSparse(dst, pair[:], dim, len(a.Indices)+len(b.Indices))
	}
	return nil
}

// sumSparse sums sparse parts of dimension dim holding total entries
// with the kernel that suits their density: a dense accumulator when the
// result may be dense, windows (sumWindows) from the density
// windowDensityShift gives for that many parts, a merge below that. Every
// kernel adds a position's values in parts order, so the choice never
// changes the bits of the result.
func sumSparse[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) error {
	switch {
	case 16*total >= dim && PreferDense(total, dim, ValueSize[T]()):
		return accumulate(dst, parts, dim, total)
	case SumsInWindows(len(parts), total, dim):
		sumWindows(dst, parts, dim, total)
	default:
		mergeParts(dst, parts, dim, total)
	}
	if PreferDense(len(dst.Indices), dim, ValueSize[T]()) {
		dst.Densify()
	}
	return nil
}

// mergeParts sums sparse parts by the merge that suits their number:
// two-pointer for two, a branch-free head scan up to smallK, a heap beyond.
func mergeParts[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) {
	switch {
	case len(parts) == 2:
		merge(dst, parts[0], parts[1])
	case len(parts) <= smallK:
		mergeSmallK(dst, parts, dim, total)
	default:
		mergeK(dst, parts, dim, total)
	}
}

// AddTo adds v into dense, which must hold v.Dim values: a scatter-add
// when v is sparse, an element-wise add when dense.
func (v *Vector[T]) AddTo(dense []T) error {
	if err := v.checkShape(); err != nil {
		return err
	}
	if v.IsBlock() {
		return addToBlock(dense, v)
	}
	if len(dense) != v.Dim {
		return fmt.Errorf("%w: adding a vector of dimension %d into %d values", ErrInvalid, v.Dim, len(dense))
	}
	if v.Dense {
		addDense(dense, dense, v.Values)
		return nil
	}
	return scatterAdd(dense, v.Indices, v.Values)
}

// AddAllTo adds every part into dense (len(dense) must be each part's
// dimension), in parts order for every position, exactly as calling AddTo
// for each part in turn would, but window by window: for each window of
// 2^windowBits positions every sparse part scatters its entries of that
// window, so the window of dense stays in the L1 cache while all parts
// add into it instead of every part sweeping the whole array with random
// writes. Dense parts are added element-wise in their turn.
func AddAllTo[T Float](dense []T, parts []*Vector[T]) error {
	for _, p := range parts {
		if err := p.checkShape(); err != nil {
			return err
		}
		if p.IsBlock() {
			return addAllToBlock(dense, parts)
		}
		if p.Dim != len(dense) {
			return fmt.Errorf("%w: adding a vector of dimension %d into %d values", ErrInvalid, p.Dim, len(dense))
		}
	}
	const w = 1 << windowBits
	var posBuf [16]int
	pos := cursors(posBuf[:], len(parts))
	for base := 0; base < len(dense); base += w {
		end := min(base+w, len(dense))
		win := dense[base:end]
		for p, v := range parts {
			if v.Dense {
				addDense(win, win, v.Values[base:end])
				continue
			}
			i := pos[p]
			ix, vx := v.Indices, v.Values[:len(v.Indices)]
			for ; i < len(ix) && int(ix[i]) < end; i++ {
				x := int(ix[i]) - base
				if x < 0 {
					return fmt.Errorf("%w: indices of part %d not sorted at position %d", ErrInvalid, p, i)
				}
				win[x] += vx[i]
			}
			pos[p] = i
		}
	}
	for p, v := range parts {
		if !v.Dense && pos[p] < len(v.Indices) {
			return errOutOfRange(v.Indices[pos[p]], pos[p], len(dense))
		}
	}
	return nil
}

// SumAll sets dst to the sum of parts, which must share one dimension and
// must not include dst. Entries with the same index are added in the order
// of parts, so every rank that sums the same parts gets the same bits.
// Sparse parts are combined by sumSparse's kernels (windowed
// accumulation, or a k-way merge when very sparse); the result goes dense
// by the switch rule, or at once when any part is dense or already large
// enough that the union must be.
func SumAll[T Float](dst *Vector[T], parts []*Vector[T]) error {
	if len(parts) == 0 {
		return fmt.Errorf("%w: SumAll of no vectors", ErrInvalid)
	}
	dim := parts[0].Dim
	dense, total := false, 0
	for _, p := range parts {
		if p == dst {
			return fmt.Errorf("%w: SumAll's destination is one of its parts", ErrInvalid)
		}
		if err := p.checkShape(); err != nil {
			return err
		}
		if p.Dim != dim {
			return fmt.Errorf("%w: summing vectors of dimensions %d and %d", ErrInvalid, dim, p.Dim)
		}
		// The union is at least as large as any part.
		dense = dense || p.Dense || PreferDense(len(p.Indices), dim, ValueSize[T]())
		total += p.NNZ()
	}
	if anyBlock(parts) {
		return sumBlocks(dst, parts)
	}
	if len(parts) == 1 {
		dst.CopyFrom(parts[0])
		return nil
	}
	if len(parts) == 2 {
		return Add(dst, parts[0], parts[1])
	}
	dst.Block = 0
	if dense {
		dst.setDense(dim)
		clear(dst.Values)
		for _, p := range parts {
			if err := p.AddTo(dst.Values); err != nil {
				return err
			}
		}
		return nil
	}
	return sumSparse(dst, parts, dim, total)
}

// setDense makes v a dense vector of dimension dim with undefined values.
func (v *Vector[T]) setDense(dim int) {
	v.Dim, v.Dense = dim, true
	v.Values = grow(v.Values, dim)
	v.Indices = v.Indices[:0]
}

// merge is the two-pointer merge of two sparse vectors into dst (sparse).
func merge[T Float](dst, a, b *Vector[T]) {
	na, nb := len(a.Indices), len(b.Indices)
	idx := grow(dst.Indices, na+nb)
	val := grow(dst.Values, na+nb)
	ai, av, bi, bv := a.Indices, a.Values[:na], b.Indices, b.Values[:nb]
	i, j, n := 0, 0, 0
	for i < na && j < nb {
		x, y := ai[i], bi[j]
		switch {
		case x < y:
			idx[n], val[n] = x, av[i]
			i++
		case y < x:
			idx[n], val[n] = y, bv[j]
			j++
		default:
			idx[n], val[n] = x, av[i]+bv[j]
			i++
			j++
		}
		n++
	}
	k := copy(idx[n:], ai[i:])
	copy(val[n:], av[i:])
	n += k
	k = copy(idx[n:], bi[j:])
	copy(val[n:], bv[j:])
	n += k
	dst.Dim, dst.Dense = a.Dim, false
	dst.Indices, dst.Values = idx[:n], val[:n]
}

// accumulate sums sparse parts by scattering into a dense accumulator
// (dst.Values) while marking touched positions in a bitmap (kept in
// dst.Indices beyond the room for the result), then reads the bitmap in
// order to produce the sorted result: O(total + dim/32) and no compare per
// entry. A position's first value is copied, later ones added in parts
// order, exactly as the merges do, so every path gives the same bits.
func accumulate[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) error {
	words := (dim + 31) / 32
	idx := grow(dst.Indices, total+words)
	seen := idx[total:]
	clear(seen)
	vals := grow(dst.Values, max(dim, total))
	// When the result may be dense, zero the accumulator up front (one
	// memclr, cheaper than filling untouched positions afterwards).
	if PreferDense(total, dim, ValueSize[T]()) {
		clear(vals[:dim])
	}
	for _, p := range parts {
		pv := p.Values[:len(p.Indices)]
		for i, x := range p.Indices {
			if int(x) >= dim {
				return errOutOfRange(x, i, dim)
			}
			w, bit := x>>5, uint32(1)<<(x&31)
			if seen[w]&bit == 0 {
				seen[w] |= bit
				vals[x] = pv[i]
			} else {
				vals[x] += pv[i]
			}
		}
	}
	n := 0
	for _, w := range seen {
		n += bits.OnesCount32(w)
	}
	dst.Dim = dim
	if PreferDense(n, dim, ValueSize[T]()) {
		// n <= total, so the accumulator was cleared above: untouched
		// positions already hold zero.
		dst.Dense, dst.Indices, dst.Values = true, idx[:0], vals[:dim]
		return nil
	}
	// Compacting forward is safe: the n-th touched position is >= n, and
	// the bitmap lies beyond every position written.
	n = 0
	for w, word := range seen {
		for word != 0 {
			x := w*32 + bits.TrailingZeros32(word)
			word &= word - 1
			idx[n], vals[n] = uint32(x), vals[x]
			n++
		}
	}
	dst.Dense, dst.Indices, dst.Values = false, idx[:n], vals[:n]
	return nil
}

// windowBits sets the window of sumWindows: 2^12 positions, whose
// accumulator (16 or 32 KiB) and bitmap stay in the L1 cache.
const windowBits = 12

// SumsInWindows says whether SumAll and Add sum k sparse parts holding
// total entries of dim positions in windows rather than by merging (the
// cost model prices the two differently).
func SumsInWindows(k, total, dim int) bool {
	return total >= dim>>windowDensityShift(k)
}

// windowDensityShift says from which density sumWindows replaces the
// merges for k parts: from one entry per 2^shift positions on average,
// where scanning a window's bitmap costs less than the merges' compare per
// entry. The merges cost more per entry as k grows (a two-way merge has
// one compare, the k-way ones a tournament), so the windows take over at
// lower densities for more parts. Benchmark: BenchmarkSumKernels, whose
// crossovers these shifts round down to.
func windowDensityShift(k int) int {
	switch {
	case k <= 2:
		return 4
	case k <= 4:
		return 6
	case k <= 8:
		return 7
	default:
		return 8
	}
}

// sumWindows sums sparse parts window by window: for each window of
// 2^windowBits positions that any part has entries in, every part in turn
// adds its entries of the window into a small dense accumulator, marking
// them in a bitmap, and the marked positions are then written out in
// order. Each part is read once, sequentially; nothing compares indices
// across parts, so there are no unpredictable branches, and all random
// access stays within the window's few KiB. A position's first value is
// copied and later ones added in parts order, exactly as the merges do,
// so every path gives the same bits.
func sumWindows[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) {
	const w = 1 << windowBits
	idx := grow(dst.Indices, total)
	val := grow(dst.Values, total)
	// The accumulator holds -0 wherever nothing has been added: -0 is the
	// exact additive identity (-0 + x is x, bit for bit, -0 and +0
	// included), so the first value of a position needs no special case
	// and the inner loop has no branch on it. Emitting a position puts
	// -0 back.
	var acc [w]T
	negZero := T(math.Copysign(0, -1))
	for i := range acc {
		acc[i] = negZero
	}
	var seen [w / 64]uint64
	var posBuf [16]int
	pos := cursors(posBuf[:], len(parts))
	n := 0
	for {
		// The next window is the one of the smallest pending index.
		next := uint32(math.MaxUint32)
		for p, v := range parts {
			if pos[p] < len(v.Indices) {
				next = min(next, v.Indices[pos[p]])
			}
		}
		if next == math.MaxUint32 && !anyLeft(parts, pos) {
			break
		}
		base := next &^ (w - 1)
		for p, v := range parts {
			i := pos[p]
			ix, vx := v.Indices, v.Values[:len(v.Indices)]
			for ; i < len(ix); i++ {
				x := ix[i] - base // entries from pos on are >= base
				if x >= w {
					break
				}
				x &= w - 1 // no-op, lets the compiler drop bounds checks
				seen[x>>6] |= 1 << (x & 63)
				acc[x] += vx[i]
			}
			pos[p] = i
		}
		out, vals := idx[n:], val[n:]
		k := 0
		for wi, word := range seen {
			if word == 0 {
				continue
			}
			seen[wi] = 0
			for word != 0 {
				x := uint32(wi*64+bits.TrailingZeros64(word)) & (w - 1)
				word &= word - 1
				out[k], vals[k] = base+x, acc[x]
				acc[x] = negZero
				k++
			}
		}
		n += k
	}
	dst.Dim, dst.Dense = dim, false
	dst.Indices, dst.Values = idx[:n], val[:n]
}

// cursors returns n zeroed positions, one per part, in buf when it is
// large enough (no allocation for the usual few parts).
func cursors(buf []int, n int) []int {
	if n > len(buf) {
		return make([]int, n)
	}
	pos := buf[:n]
	clear(pos)
	return pos
}

// anyLeft reports whether a part has entries past its position (the
// index MaxUint32 itself is valid in a dimension of 2^32).
func anyLeft[T Float](parts []*Vector[T], pos []int) bool {
	for p, v := range parts {
		if pos[p] < len(v.Indices) {
			return true
		}
	}
	return false
}

// smallK is the most parts mergeSmallK takes: up to here a linear scan of
// the heads (branch-free min, which compiles to conditional moves) beats
// the heap's unpredictable branches.
const smallK = 8

// mergeSmallK merges up to smallK sparse vectors: each step takes the
// smallest head key index<<32 | part, so equal indices meet in parts
// order exactly as in mergeK and the sums have the same bits. An
// exhausted part's head is the largest key, which never wins while any
// part remains.
func mergeSmallK[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) {
	idx := grow(dst.Indices, total)
	val := grow(dst.Values, total)
	const done = ^uint64(0)
	var heads [smallK]uint64
	var pos [smallK]int
	for p := range heads {
		heads[p] = done
		if p < len(parts) && len(parts[p].Indices) > 0 {
			heads[p] = uint64(parts[p].Indices[0])<<32 | uint64(p)
		}
	}
	n := 0
	last := int64(-1)
	for {
		key := min(min(min(heads[0], heads[1]), min(heads[2], heads[3])),
			min(min(heads[4], heads[5]), min(heads[6], heads[7])))
		if key == done {
			break
		}
		p, x := int(uint32(key)), uint32(key>>32)
		pv := parts[p]
		i := pos[p]
		y := pv.Values[i]
		if int64(x) == last {
			val[n-1] += y
		} else {
			idx[n], val[n] = x, y
			n++
			last = int64(x)
		}
		i++
		pos[p] = i
		if i < len(pv.Indices) {
			heads[p] = uint64(pv.Indices[i])<<32 | uint64(p)
		} else {
			heads[p] = done
		}
	}
	dst.Dim, dst.Dense = dim, false
	dst.Indices, dst.Values = idx[:n], val[:n]
}

// mergeK merges several sparse vectors with a binary min-heap of keys
// index<<32 | part: one integer compare orders by index and breaks ties by
// part number, so equal indices are added in parts order.
func mergeK[T Float](dst *Vector[T], parts []*Vector[T], dim, total int) {
	idx := grow(dst.Indices, total)
	val := grow(dst.Values, total)
	var posBuf [64]int
	var heapBuf [64]uint64
	pos, heap := posBuf[:0], heapBuf[:0]
	if len(parts) > len(posBuf) {
		pos, heap = make([]int, 0, len(parts)), make([]uint64, 0, len(parts))
	}
	for p, v := range parts {
		pos = append(pos, 0)
		if len(v.Indices) > 0 {
			heap = append(heap, uint64(v.Indices[0])<<32|uint64(p))
		}
	}
	keyheap.Init(heap)
	n := 0
	for len(heap) > 0 {
		key := heap[0]
		p, x := int(uint32(key)), uint32(key>>32)
		y := parts[p].Values[pos[p]]
		if n > 0 && idx[n-1] == x {
			val[n-1] += y
		} else {
			idx[n], val[n] = x, y
			n++
		}
		pos[p]++
		if pos[p] < len(parts[p].Indices) {
			heap[0] = uint64(parts[p].Indices[pos[p]])<<32 | uint64(p)
		} else {
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		keyheap.Down(heap, 0)
	}
	dst.Dim, dst.Dense = dim, false
	dst.Indices, dst.Values = idx[:n], val[:n]
}

// scatterAdd adds vals at idx into dense; an index outside dense (an
// invalid vector) stops it with an error instead of a panic.
func scatterAdd[T Float](dense []T, idx []uint32, vals []T) error {
	vals = vals[:len(idx)]
	for i, x := range idx {
		if int(x) >= len(dense) {
			return errOutOfRange(x, i, len(dense))
		}
		dense[x] += vals[i]
	}
	return nil
}

func errOutOfRange(x uint32, pos, dim int) error {
	return fmt.Errorf("%w: index %d at position %d is out of range for dimension %d", ErrInvalid, x, pos, dim)
}

func addDense[T Float](dst, a, b []T) {
	b = b[:len(a)]
	dst = dst[:len(a)]
	for i := range a {
		dst[i] = a[i] + b[i]
	}
}
