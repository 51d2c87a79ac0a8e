//go:build !(386 || amd64 || arm64 || ppc64le) || purego

package quant

func unpackFast(out []uint32, prev uint64, src []byte, bit, width uint) (uint64, uint64, uint) {
	return unpackFastSafe(out, prev, src, bit, width)
}
