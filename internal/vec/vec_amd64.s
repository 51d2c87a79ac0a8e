//go:build amd64 && !purego

#include "textflag.h"

// The AVX2 kernels (see vec_amd64.go). Loads and stores are unaligned.

// Add: dst[i] += src[i] for n elements, n a positive multiple of 32
// (float32) or 16 (float64), four 256-bit registers per iteration.

// func addFloat32AVX2(dst, src *float32, n int)
TEXT ·addFloat32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   sum32_done

sum32_loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VADDPS  64(SI), Y2, Y2
	VADDPS  96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	DECQ    CX
	JNZ     sum32_loop

sum32_done:
	VZEROUPPER
	RET

// func addFloat64AVX2(dst, src *float64, n int)
TEXT ·addFloat64AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   sum64_done

sum64_loop:
	VMOVUPD (DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	VADDPD  (SI), Y0, Y0
	VADDPD  32(SI), Y1, Y1
	VADDPD  64(SI), Y2, Y2
	VADDPD  96(SI), Y3, Y3
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	DECQ    CX
	JNZ     sum64_loop

sum64_done:
	VZEROUPPER
	RET

// AppendAtLeast32: for n keys (n a positive multiple of 32), writes base+i
// to dst for every key with key&0x7fffffff >= t (1 <= t <= 1<<31), in
// order, and returns how many it wrote. Masked keys are non-negative, so
// the signed compare key > t-1 is key >= t. Each iteration tests 32 keys
// and turns the four compares into one 32-bit mask; only a non-zero mask
// is walked, one set bit at a time.
// func atLeast32AVX2(dst, keys *uint32, n int, t, base uint32) int
TEXT ·atLeast32AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ keys+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL t+24(FP), AX
	DECL AX
	MOVL AX, X4
	VPBROADCASTD X4, Y4
	MOVL $0x7fffffff, AX
	MOVL AX, X5
	VPBROADCASTD X5, Y5
	MOVL base+28(FP), R8
	XORQ R9, R9
	SHRQ $5, CX
	JZ   atleast_done

atleast_loop:
	VPAND     (SI), Y5, Y0
	VPAND     32(SI), Y5, Y1
	VPAND     64(SI), Y5, Y2
	VPAND     96(SI), Y5, Y3
	VPCMPGTD  Y4, Y0, Y0
	VPCMPGTD  Y4, Y1, Y1
	VPCMPGTD  Y4, Y2, Y2
	VPCMPGTD  Y4, Y3, Y3
	VMOVMSKPS Y0, AX
	VMOVMSKPS Y1, BX
	SHLL      $8, BX
	ORL       BX, AX
	VMOVMSKPS Y2, BX
	SHLL      $16, BX
	ORL       BX, AX
	VMOVMSKPS Y3, BX
	SHLL      $24, BX
	ORL       BX, AX
	JZ        atleast_next

atleast_bits:
	TZCNTL AX, BX
	ADDL   R8, BX
	MOVL   BX, (DI)(R9*4)
	INCQ   R9
	BLSRL  AX, AX
	JNZ    atleast_bits

atleast_next:
	ADDQ $128, SI
	ADDL $32, R8
	DECQ CX
	JNZ  atleast_loop

atleast_done:
	VZEROUPPER
	MOVQ R9, ret+32(FP)
	RET
