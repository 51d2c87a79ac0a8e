//go:build amd64 && !purego

#include "textflag.h"

// unpackGapsAVX2 is the vector path of unpackGaps (see unpack_amd64.go):
// groups > 0 groups of 8 gaps of width bits, group g in the 16 bytes at
// src + g*width, each gap plus one added to the running index, which
// starts at prev; it writes the 8*groups indices to out and returns the
// last one and the OR of the gaps. tables is the width's shuffle (32
// bytes) and lane shifts (8 dwords).

DATA unpackOnes<>+0(SB)/8, $0x0000000100000001
DATA unpackOnes<>+8(SB)/8, $0x0000000100000001
DATA unpackOnes<>+16(SB)/8, $0x0000000100000001
DATA unpackOnes<>+24(SB)/8, $0x0000000100000001
GLOBL unpackOnes<>(SB), RODATA|NOPTR, $32

DATA unpackLast<>+0(SB)/8, $0x0000000700000007
DATA unpackLast<>+8(SB)/8, $0x0000000700000007
DATA unpackLast<>+16(SB)/8, $0x0000000700000007
DATA unpackLast<>+24(SB)/8, $0x0000000700000007
GLOBL unpackLast<>(SB), RODATA|NOPTR, $32

// func unpackGapsAVX2(out *uint32, src *byte, groups, width int, tables *[64]byte, mask, prev uint32) (last, or uint32)
TEXT ·unpackGapsAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ width+24(FP), DX
	MOVQ tables+32(FP), R8
	VMOVDQU 0(R8), Y10          // byte shuffle
	VMOVDQU 32(R8), Y11         // lane shifts
	MOVL mask+40(FP), AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL prev+44(FP), AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13       // the running index, in every lane
	VMOVDQU unpackOnes<>(SB), Y14
	VMOVDQU unpackLast<>(SB), Y15
	VPXOR Y9, Y9, Y9            // OR of the gaps

loop:
	VBROADCASTI128 (SI), Y0
	VPSHUFB Y10, Y0, Y0         // lane j: the bytes of gap j
	VPSRLVD Y11, Y0, Y0
	VPAND Y12, Y0, Y0           // the gaps
	VPOR Y0, Y9, Y9
	VPADDD Y14, Y0, Y0          // gap + 1
	VPSLLDQ $4, Y0, Y1          // inclusive prefix sum within each half
	VPADDD Y1, Y0, Y0
	VPSLLDQ $8, Y0, Y1
	VPADDD Y1, Y0, Y0
	VPSHUFD $0xff, Y0, Y1       // the low half's total, added to the high half
	VPERM2I128 $0x08, Y1, Y1, Y1
	VPADDD Y1, Y0, Y0
	VPADDD Y13, Y0, Y0
	VMOVDQU Y0, (DI)
	VPERMD Y0, Y15, Y13         // lane 7 is the next group's start
	ADDQ DX, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop

	VMOVD X13, AX
	MOVL AX, last+48(FP)
	VEXTRACTI128 $1, Y9, X1
	VPOR X1, X9, X9
	VPSHUFD $0x4e, X9, X1
	VPOR X1, X9, X9
	VPSHUFD $0xb1, X9, X1
	VPOR X1, X9, X9
	VMOVD X9, AX
	MOVL AX, or+52(FP)
	VZEROUPPER
	RET

DATA unpack4Shifts<>+0(SB)/8, $0x0000000400000000
DATA unpack4Shifts<>+8(SB)/8, $0x0000000c00000008
DATA unpack4Shifts<>+16(SB)/8, $0x0000001400000010
DATA unpack4Shifts<>+24(SB)/8, $0x0000001c00000018
GLOBL unpack4Shifts<>(SB), RODATA|NOPTR, $32

// unpack4AVX2 decodes n 4-bit codes (n a positive multiple of 8, two a
// byte, low nibble first) into float32 values through table, the values
// of the magnitudes 0..7; bit 3 of a code is the sign. With add set it
// adds them to dst instead. Eight codes a step: broadcast their 4 bytes,
// shift lane j right by 4j, and look the magnitude up with VPERMPS.
//
// func unpack4AVX2(dst *float32, codes *byte, n int, table *float32, add bool)
TEXT ·unpack4AVX2(SB), NOSPLIT, $0-33
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ table+24(FP), R8
	MOVBLZX add+32(FP), AX
	VMOVUPS (R8), Y10
	VMOVDQU unpack4Shifts<>(SB), Y11
	MOVL $7, DX
	VMOVD DX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x80000000, DX
	VMOVD DX, X13
	VPBROADCASTD X13, Y13
	SHRQ $3, CX
	TESTQ AX, AX
	JNZ add

set:
	VPBROADCASTD (SI), Y0
	VPSRLVD Y11, Y0, Y0
	VPAND Y12, Y0, Y1           // magnitude
	VPSLLD $28, Y0, Y0
	VPAND Y13, Y0, Y0           // sign
	VPERMPS Y10, Y1, Y1
	VPOR Y0, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ set
	VZEROUPPER
	RET

add:
	VPBROADCASTD (SI), Y0
	VPSRLVD Y11, Y0, Y0
	VPAND Y12, Y0, Y1
	VPSLLD $28, Y0, Y0
	VPAND Y13, Y0, Y0
	VPERMPS Y10, Y1, Y1
	VPOR Y0, Y1, Y1
	VADDPS (DI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ add
	VZEROUPPER
	RET
