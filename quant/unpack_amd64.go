//go:build amd64 && !purego

package quant

import "golang.org/x/sys/cpu"

// Decoding a q4 sparse message is the largest CPU cost of receiving one
// (go tool pprof on sparcml bench --op sparse-allreduce --quant q4
// --cpuprofile): its index gaps first, then its 4-bit values. With
// AVX2 both run in vector kernels (unpack_amd64.s). Blocks of widths up
// to 16 bits decode 8 gaps at a time: eight gaps of w bits are exactly w
// bytes, so each group is one 16-byte load,
// a byte shuffle that puts every gap's bytes in its own 32-bit lane, one
// shift per lane and a mask, then a prefix sum. Wider gaps (densities
// below about 1 in 65536) keep the scalar loop. The 4-bit values decode 8
// at a time, their magnitudes looked up in the bucket's table with one
// VPERMPS and the sign bit moved into place. Benchmark: go test -run '^$'
// -bench UnpackPaths ./quant/ times both paths of both kernels side by
// side; TestUnpackGapsVecMatchesScalar and TestUnpack4VecMatchesScalar
// compare their results.
//
// The flag is a variable so tests can run the scalar paths on this CPU.
var useUnpackAVX2 = cpu.X86.HasAVX2 // HasAVX2 also means the OS saves YMM state

// maxVecWidth is the widest gap the vector kernel takes: a gap of 16 bits
// at any of the 8 bit offsets fits the 4 bytes of its lane.
const maxVecWidth = 16

// unpackTables holds, per width 1..16, the kernel's byte shuffle (32
// bytes: lane j takes the bytes that hold gap j, 0x80 zeroing the rest)
// and the lanes' right shifts (8 dwords: gap j's offset within its first
// byte).
var unpackTables = buildUnpackTables()

func buildUnpackTables() (t [maxVecWidth + 1][64]byte) {
	for w := 1; w <= maxVecWidth; w++ {
		for j := range 8 {
			first, last := j*w/8, ((j+1)*w-1)/8
			for k := range 4 {
				b := byte(0x80)
				if first+k <= last {
					b = byte(first + k)
				}
				t[w][4*j+k] = b
			}
			t[w][32+4*j] = byte(j * w % 8)
		}
	}
	return t
}

//go:noescape
func unpackGapsAVX2(out *uint32, src *byte, groups, width int, tables *[64]byte, mask, prev uint32) (last, or uint32)

// unpackGapsVec decodes the leading groups of 8 gaps of a block whose
// bits start at byte off of src (what unpackGaps decodes, after the index
// prev) and returns how many gaps it did, the last index and the OR of
// those gaps; unpackGaps does the rest. It takes the groups whose 16-byte
// load stays inside src.
func unpackGapsVec(out []uint32, prev uint64, src []byte, off int, width uint) (int, uint64, uint64) {
	if !useUnpackAVX2 || width == 0 || width > maxVecWidth {
		return 0, prev, 0
	}
	// Group g's load is bytes [off+g*width, off+g*width+16).
	groups := len(out) / 8
	if room := len(src) - 16 - off; room < 0 {
		groups = 0
	} else {
		groups = min(groups, room/int(width)+1)
	}
	if groups == 0 {
		return 0, prev, 0
	}
	last, or := unpackGapsAVX2(&out[0], &src[off], groups, int(width), &unpackTables[width], uint32(1)<<width-1, uint32(prev))
	// A block's indices grow by less than 2^32 (at most 128 gaps of 16
	// bits), so the 32-bit lanes' last index gives the 64-bit one.
	return 8 * groups, prev + uint64(last-uint32(prev)), uint64(or)
}

//go:noescape
func unpack4AVX2(dst *float32, codes *byte, n int, table *float32, add bool)

// unpack4Vec decodes a prefix of a q4 bucket's values (two codes a byte)
// through table, whose entries 0..7 are the magnitudes' values, and
// returns how many it did, a multiple of 8; unpack does the rest.
func unpack4Vec[T float](dst []T, codes []byte, table *[256]float32, add bool) int {
	d, ok := any(dst).([]float32)
	n := len(dst) &^ 7
	if !ok || !useUnpackAVX2 || n == 0 {
		return 0
	}
	_ = codes[n/2-1]
	unpack4AVX2(&d[0], &codes[0], n, &table[0], add)
	return n
}
