//go:build amd64 && !purego

#include "textflag.h"

// Vector kernels for the fp16 and bf16 codecs (see half_amd64.go). Each
// processes n values, n a positive multiple of the kernel's width (8 for
// fp16, 16 for bf16 encode, 8 for bf16 decode); the Go caller does the
// tail with the scalar code. Loads and stores are unaligned.

// func fp16EncodeF16C(dst *byte, src *float32, n int)
// VCVTPS2PH with immediate 0: round to nearest even, independent of MXCSR.
TEXT ·fp16EncodeF16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   fp16enc_done

fp16enc_loop:
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       fp16enc_loop

fp16enc_done:
	VZEROUPPER
	RET

// func fp16DecodeF16C(dst *float32, src *byte, n int)
TEXT ·fp16DecodeF16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   fp16dec_done

fp16dec_loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       fp16dec_loop

fp16dec_done:
	VZEROUPPER
	RET

// func fp16DecodeAddF16C(dst *float32, src *byte, n int)
// dst[i] += decoded[i]. The decoded value is the first operand of the
// addition, as the Go compiler orders the scalar dst[i] += x, so that when
// both are NaN the same NaN is kept (x86 returns the first operand's).
TEXT ·fp16DecodeAddF16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   fp16add_done

fp16add_loop:
	VCVTPH2PS (SI), Y0
	VADDPS    (DI), Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       fp16add_loop

fp16add_done:
	VZEROUPPER
	RET

// func bf16EncodeAVX2(dst *byte, src *float32, n int)
// The scalar Float32ToBF16 on 8 lanes: (bits + 0x7fff + (bits>>16 & 1)) >> 16,
// or bits>>16 | 0x40 where |bits| > Inf (NaN). 16 values per iteration:
// two vectors of 32-bit results are packed to 16 bits (VPACKUSDW works
// within 128-bit lanes, VPERMQ puts the quadwords back in order).
TEXT ·bf16EncodeAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   bf16enc_done

	MOVL         $1, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10 // 1
	MOVL         $0x7fff, AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11 // 0x7fff
	MOVL         $0x7fffffff, AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12 // abs mask
	MOVL         $0x7f800000, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13 // +Inf
	MOVL         $0x40, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14 // quiet bit of a bfloat16 NaN

bf16enc_loop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y4

	VPSRLD    $16, Y0, Y1     // bits >> 16
	VPAND     Y10, Y1, Y2     // lowest kept bit
	VPADDD    Y11, Y2, Y2     // + 0x7fff
	VPADDD    Y0, Y2, Y2      // + bits
	VPSRLD    $16, Y2, Y2     // rounded
	VPAND     Y12, Y0, Y3     // |bits|
	VPCMPGTD  Y13, Y3, Y3     // NaN lanes: |bits| > Inf
	VPOR      Y14, Y1, Y1     // quiet NaN
	VPBLENDVB Y3, Y1, Y2, Y2  // NaN lanes take the quiet NaN

	VPSRLD    $16, Y4, Y5
	VPAND     Y10, Y5, Y6
	VPADDD    Y11, Y6, Y6
	VPADDD    Y4, Y6, Y6
	VPSRLD    $16, Y6, Y6
	VPAND     Y12, Y4, Y7
	VPCMPGTD  Y13, Y7, Y7
	VPOR      Y14, Y5, Y5
	VPBLENDVB Y7, Y5, Y6, Y6

	// Every lane is at most 0xffff, so the unsigned saturation never
	// changes a value.
	VPACKUSDW Y6, Y2, Y2
	VPERMQ    $0xd8, Y2, Y2
	VMOVDQU   Y2, (DI)

	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  bf16enc_loop

bf16enc_done:
	VZEROUPPER
	RET

// func bf16DecodeAVX2(dst *float32, src *byte, n int)
TEXT ·bf16DecodeAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   bf16dec_done

bf16dec_loop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       bf16dec_loop

bf16dec_done:
	VZEROUPPER
	RET

// func bf16DecodeAddAVX2(dst *float32, src *byte, n int)
TEXT ·bf16DecodeAddAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   bf16add_done

bf16add_loop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VADDPS    (DI), Y0, Y0 // decoded value first, as in the fp16 kernel
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       bf16add_loop

bf16add_done:
	VZEROUPPER
	RET
