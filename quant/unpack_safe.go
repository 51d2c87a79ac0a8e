package quant

import "encoding/binary"

// unpackFastSafe is unpackFast with bounds-checked loads: the version of
// big-endian CPUs and -tags purego builds, and the reference the unsafe
// one is tested against.
func unpackFastSafe(out []uint32, prev uint64, src []byte, bit, width uint) (uint64, uint64, uint) {
	mask := uint64(1)<<(width&63) - 1
	var or uint64
	for i := range out {
		g := binary.LittleEndian.Uint64(src[bit>>3:]) >> (bit & 7) & mask
		bit += width
		or |= g
		prev += g + 1
		out[i] = uint32(prev)
	}
	return prev, or, bit
}
