//go:build (386 || amd64 || arm64 || ppc64le) && !purego

package quant

import "unsafe"

// unpackFast is unpackGaps' main loop, for gaps whose 8-byte loads stay
// within src: the caller computes how many do (the load of gap i starts
// at byte (bit + i*width)/8, and that plus 8 is at most len(src) for every
// i < len(out)). On these little-endian CPUs, which load unaligned words
// in hardware (mips and riscv may trap to emulate it), the load is a plain
// unaligned 8-byte read, without the bounds checks that keep the safe
// version's variables from staying in registers. Benchmark: go test
// -run '^$' -bench Indices/decode/bitpack -cpu 1 ./quant/, with and
// without -tags purego (docs/PERFORMANCE.md, "Low precision").
// TestUnpackFastMatchesSafe compares it with unpackFastSafe.
func unpackFast(out []uint32, prev uint64, src []byte, bit, width uint) (uint64, uint64, uint) {
	if len(out) == 0 {
		return prev, 0, bit
	}
	// The one check that makes every load below in bounds.
	if last := (bit + uint(len(out)-1)*width) >> 3; last+8 > uint(len(src)) {
		panic("quant: unpackFast past the end of its stream")
	}
	mask := uint64(1)<<(width&63) - 1
	base := unsafe.Pointer(unsafe.SliceData(src))
	var or uint64
	for i := range out {
		g := *(*uint64)(unsafe.Add(base, bit>>3)) >> (bit & 7) & mask
		bit += width
		or |= g
		prev += g + 1
		out[i] = uint32(prev)
	}
	return prev, or, bit
}
