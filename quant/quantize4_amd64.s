//go:build amd64 && !purego

#include "textflag.h"

// Vector kernels of the 4-bit stochastic quantizer (see quantize4_amd64.go):
// quantize4AVX2 and quantize4AVX512 write the code bytes of n pairs of
// float32, n a positive multiple of 16, exactly as quantizePairs4 would;
// maxAbsBitsAVX2 is bucketScale's maximum. Loads and stores are unaligned.

// SplitMix64 constants: the increments 1..8 times gamma (the AVX2
// kernel uses the first 4), and the two multipliers split into 32-bit
// halves for VPMULUDQ (which multiplies the low dwords of each quadword).
DATA q4gammas<>+0(SB)/8, $0x9e3779b97f4a7c15
DATA q4gammas<>+8(SB)/8, $0x3c6ef372fe94f82a
DATA q4gammas<>+16(SB)/8, $0xdaa66d2c7ddf743f
DATA q4gammas<>+24(SB)/8, $0x78dde6e5fd29f054
DATA q4gammas<>+32(SB)/8, $0x1715609f7c746c69
DATA q4gammas<>+40(SB)/8, $0xb54cda58fbbee87e
DATA q4gammas<>+48(SB)/8, $0x538454127b096493
DATA q4gammas<>+56(SB)/8, $0xf1bbcdcbfa53e0a8
GLOBL q4gammas<>(SB), RODATA|NOPTR, $64

DATA q4c1lo<>+0(SB)/8, $0x1ce4e5b9
DATA q4c1lo<>+8(SB)/8, $0x1ce4e5b9
DATA q4c1lo<>+16(SB)/8, $0x1ce4e5b9
DATA q4c1lo<>+24(SB)/8, $0x1ce4e5b9
GLOBL q4c1lo<>(SB), RODATA|NOPTR, $32

DATA q4c1hi<>+0(SB)/8, $0xbf58476d
DATA q4c1hi<>+8(SB)/8, $0xbf58476d
DATA q4c1hi<>+16(SB)/8, $0xbf58476d
DATA q4c1hi<>+24(SB)/8, $0xbf58476d
GLOBL q4c1hi<>(SB), RODATA|NOPTR, $32

DATA q4c2lo<>+0(SB)/8, $0x133111eb
DATA q4c2lo<>+8(SB)/8, $0x133111eb
DATA q4c2lo<>+16(SB)/8, $0x133111eb
DATA q4c2lo<>+24(SB)/8, $0x133111eb
GLOBL q4c2lo<>(SB), RODATA|NOPTR, $32

DATA q4c2hi<>+0(SB)/8, $0x94d049bb
DATA q4c2hi<>+8(SB)/8, $0x94d049bb
DATA q4c2hi<>+16(SB)/8, $0x94d049bb
DATA q4c2hi<>+24(SB)/8, $0x94d049bb
GLOBL q4c2hi<>(SB), RODATA|NOPTR, $32

// The high dword of 2^52 + n (n < 2^36) as a float64 is 0x43300000 + n>>32.
DATA q4magic<>+0(SB)/8, $0x4330000043300000
DATA q4magic<>+8(SB)/8, $0x4330000043300000
DATA q4magic<>+16(SB)/8, $0x4330000043300000
DATA q4magic<>+24(SB)/8, $0x4330000043300000
GLOBL q4magic<>(SB), RODATA|NOPTR, $32

DATA q4magic8<>+0(SB)/8, $0x4330000843300008
DATA q4magic8<>+8(SB)/8, $0x4330000843300008
DATA q4magic8<>+16(SB)/8, $0x4330000843300008
DATA q4magic8<>+24(SB)/8, $0x4330000843300008
GLOBL q4magic8<>(SB), RODATA|NOPTR, $32

// Dword permutation: the even values of 4 pairs, then the odd ones.
DATA q4perm<>+0(SB)/8, $0x0000000200000000
DATA q4perm<>+8(SB)/8, $0x0000000600000004
DATA q4perm<>+16(SB)/8, $0x0000000300000001
DATA q4perm<>+24(SB)/8, $0x0000000700000005
GLOBL q4perm<>(SB), RODATA|NOPTR, $32

// Byte shuffle of the output (per 128-bit lane): bytes 0, 8, 1, 9, 2, 10,
// 3, 11 to the low 8 bytes.
DATA q4pack<>+0(SB)/8, $0x0b030a0209010800
DATA q4pack<>+8(SB)/8, $0x8080808080808080
DATA q4pack<>+16(SB)/8, $0x0b030a0209010800
DATA q4pack<>+24(SB)/8, $0x8080808080808080
GLOBL q4pack<>(SB), RODATA|NOPTR, $32

DATA q4half<>+0(SB)/8, $0x3fe0000000000000  // 0.5
GLOBL q4half<>(SB), RODATA|NOPTR, $8

DATA q4two52<>+0(SB)/8, $0x4330000000000000 // 2^52
GLOBL q4two52<>(SB), RODATA|NOPTR, $8

DATA q4absmask<>+0(SB)/4, $0x7fffffff
GLOBL q4absmask<>(SB), RODATA|NOPTR, $4

DATA q4maxlevel<>+0(SB)/4, $0x43300007
GLOBL q4maxlevel<>(SB), RODATA|NOPTR, $4

// Q4GROUP quantizes the 4 pairs (8 float32) at off(SI) with the next 4
// SplitMix64 outputs, leaving in the low byte of quadword k of V the code
// byte of pair k (and the odd code in the high dword: the packing ignores
// it). It uses Y0-Y4, reads the constants Y7-Y14 and advances the states
// in Y15.
//
// Random numbers: Y15 holds the 4 states s + k*gamma, k = 1..4, and
// mix(z) = xorshift-multiply-xorshift-multiply-xorshift; a 64-bit product
// by C is lo(z)*lo(C) + (hi(z)*lo(C) + lo(z)*hi(C)) << 32.
//
// Codes: |x| is permuted into evens | odds, widened to float64, multiplied
// by invStep, 0.5 added (two roundings, as the scalar code), truncated
// (VROUNDPD $3) and made an integer n < 2^36 in the low bits by adding
// 2^52 (exact). Adding the 32 random bits to those bits and keeping the
// high dword gives 0x43300000 + (n + r)>>32, clamped at 0x43300007 with an
// unsigned minimum; XOR with 0x43300000 or 0x43300008 (picked by the sign
// of x) leaves the code. The odd code is then shifted next to the even one.
#define Q4GROUP(off, V) \
	VPSRLQ       $30, Y15, Y0; \
	VPXOR        Y15, Y0, Y0; \
	VPADDQ       Y14, Y15, Y15; \
	VPSRLQ       $32, Y0, Y1; \
	VPMULUDQ     q4c1lo<>(SB), Y1, Y1; \
	VPMULUDQ     q4c1hi<>(SB), Y0, Y2; \
	VPADDQ       Y2, Y1, Y1; \
	VPSLLQ       $32, Y1, Y1; \
	VPMULUDQ     q4c1lo<>(SB), Y0, Y0; \
	VPADDQ       Y1, Y0, Y0; \
	VPSRLQ       $27, Y0, Y1; \
	VPXOR        Y1, Y0, Y0; \
	VPSRLQ       $32, Y0, Y1; \
	VPMULUDQ     q4c2lo<>(SB), Y1, Y1; \
	VPMULUDQ     q4c2hi<>(SB), Y0, Y2; \
	VPADDQ       Y2, Y1, Y1; \
	VPSLLQ       $32, Y1, Y1; \
	VPMULUDQ     q4c2lo<>(SB), Y0, Y0; \
	VPADDQ       Y1, Y0, Y0; \
	VPSRLQ       $31, Y0, Y1; \
	VPXOR        Y1, Y0, Y0; \
	VMOVDQU      off(SI), Y1; \
	VANDPS       Y9, Y1, Y2; \
	VPERMPS      Y2, Y8, Y2; \
	VEXTRACTF128 $1, Y2, X3; \
	VCVTPS2PD    X2, Y2; \
	VCVTPS2PD    X3, Y3; \
	VMULPD       Y13, Y2, Y2; \
	VMULPD       Y13, Y3, Y3; \
	VADDPD       Y12, Y2, Y2; \
	VADDPD       Y12, Y3, Y3; \
	VROUNDPD     $3, Y2, Y2; \
	VROUNDPD     $3, Y3, Y3; \
	VADDPD       Y11, Y2, Y2; \
	VADDPD       Y11, Y3, Y3; \
	VPAND        Y10, Y0, Y4; \
	VPSRLQ       $32, Y0, Y0; \
	VPADDQ       Y4, Y2, Y2; \
	VPADDQ       Y0, Y3, Y3; \
	VPSRLQ       $32, Y2, Y2; \
	VPANDN       Y3, Y10, Y3; \
	VPOR         Y3, Y2, Y2; \
	VPMINUD      Y7, Y2, Y2; \
	VPXOR        q4magic<>(SB), Y2, Y3; \
	VPXOR        q4magic8<>(SB), Y2, Y2; \
	VBLENDVPS    Y1, Y2, Y3, V; \
	VPSRLQ       $28, V, Y0; \
	VPOR         Y0, V, V

// func quantize4AVX2(codes *byte, x *float32, n int, invStep float64, state uint64)
// Writes the n code bytes of the n pairs at x (n a positive multiple of
// 16), drawing from the SplitMix64 state; the caller advances the state by
// n draws.
TEXT ·quantize4AVX2(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   q4_done

	VBROADCASTSD invStep+24(FP), Y13
	VPBROADCASTQ state+32(FP), Y15
	VPADDQ       q4gammas<>(SB), Y15, Y15 // s + k*gamma, k = 1..4
	VPBROADCASTQ q4gammas<>+24(SB), Y14   // 4*gamma
	VBROADCASTSD q4half<>(SB), Y12
	VBROADCASTSD q4two52<>(SB), Y11
	VPCMPEQD     Y10, Y10, Y10
	VPSRLQ       $32, Y10, Y10            // low dword mask
	VPBROADCASTD q4absmask<>(SB), Y9
	VMOVDQU      q4perm<>(SB), Y8
	VPBROADCASTD q4maxlevel<>(SB), Y7

q4_loop:
	// 16 pairs: quadword k of group g is pair 4g+k. The four groups'
	// bytes are gathered in the low dwords of Y5 (byte g of dword k is
	// pair 4g+k), then put in order.
	Q4GROUP(0, Y5)
	Q4GROUP(32, Y6)
	VPSLLQ $8, Y6, Y6
	VPOR   Y6, Y5, Y5
	Q4GROUP(64, Y6)
	Q4GROUP(96, Y4)
	VPSLLQ $8, Y4, Y4
	VPOR   Y4, Y6, Y6
	VPSLLQ $16, Y6, Y6
	VPOR   Y6, Y5, Y5

	// Lane 0 holds pairs 0, 1, 4, 5, 8, 9, 12, 13 (dwords 0 and 2), lane 1
	// the others: gather each lane's bytes in order, interleave words.
	VPSHUFB      q4pack<>(SB), Y5, Y5
	VEXTRACTI128 $1, Y5, X6
	VPUNPCKLWD   X6, X5, X5
	VMOVDQU      X5, (DI)

	ADDQ $128, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  q4_loop

q4_done:
	VZEROUPPER
	RET

// func maxAbsBitsAVX2(x *float32, n int) uint32
// Returns the maximum of bits(x[i]) & 0x7fffffff over n values, n a
// positive multiple of 32.
TEXT ·maxAbsBitsAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $5, CX
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	VPXOR        Y2, Y2, Y2
	VPXOR        Y3, Y3, Y3
	JZ           maxabs_reduce
	VPBROADCASTD q4absmask<>(SB), Y8

maxabs_loop:
	VPAND   (SI), Y8, Y4
	VPAND   32(SI), Y8, Y5
	VPAND   64(SI), Y8, Y6
	VPAND   96(SI), Y8, Y7
	VPMAXUD Y4, Y0, Y0
	VPMAXUD Y5, Y1, Y1
	VPMAXUD Y6, Y2, Y2
	VPMAXUD Y7, Y3, Y3
	ADDQ    $128, SI
	DECQ    CX
	JNZ     maxabs_loop

maxabs_reduce:
	VPMAXUD      Y1, Y0, Y0
	VPMAXUD      Y3, Y2, Y2
	VPMAXUD      Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUD      X1, X0, X0
	VMOVD        X0, AX
	MOVL         AX, ret+16(FP)
	VZEROUPPER
	RET

// AVX-512 (F and DQ) version: 8 pairs per group, with VPMULLQ for the
// generator's products and VCVTTPD2UQQ for the truncation, the signs in a
// mask register and VPMOVQB to store the bytes.
DATA q4mul<>+0(SB)/8, $0xbf58476d1ce4e5b9
DATA q4mul<>+8(SB)/8, $0x94d049bb133111eb
GLOBL q4mul<>(SB), RODATA|NOPTR, $16

// Dword permutation: the 8 even values, then the 8 odd ones.
DATA q4perm16<>+0(SB)/8, $0x0000000200000000
DATA q4perm16<>+8(SB)/8, $0x0000000600000004
DATA q4perm16<>+16(SB)/8, $0x0000000a00000008
DATA q4perm16<>+24(SB)/8, $0x0000000e0000000c
DATA q4perm16<>+32(SB)/8, $0x0000000300000001
DATA q4perm16<>+40(SB)/8, $0x0000000700000005
DATA q4perm16<>+48(SB)/8, $0x0000000b00000009
DATA q4perm16<>+56(SB)/8, $0x0000000f0000000d
GLOBL q4perm16<>(SB), RODATA|NOPTR, $64

// VPERMT2D index: quadword k = high dword of quadword k of the first
// table (even level), high dword of quadword k of the second (odd level).
DATA q4pick<>+0(SB)/8, $0x0000001100000001
DATA q4pick<>+8(SB)/8, $0x0000001300000003
DATA q4pick<>+16(SB)/8, $0x0000001500000005
DATA q4pick<>+24(SB)/8, $0x0000001700000007
DATA q4pick<>+32(SB)/8, $0x0000001900000009
DATA q4pick<>+40(SB)/8, $0x0000001b0000000b
DATA q4pick<>+48(SB)/8, $0x0000001d0000000d
DATA q4pick<>+56(SB)/8, $0x0000001f0000000f
GLOBL q4pick<>(SB), RODATA|NOPTR, $64

DATA q4seven<>+0(SB)/4, $7
GLOBL q4seven<>(SB), RODATA|NOPTR, $4

DATA q4eight<>+0(SB)/4, $8
GLOBL q4eight<>(SB), RODATA|NOPTR, $4

DATA q4lo32<>+0(SB)/8, $0xffffffff
GLOBL q4lo32<>(SB), RODATA|NOPTR, $8

// Q4GROUP512 quantizes the 8 pairs (16 float32) at off(SI) into the 8
// bytes at dst(DI), with the next 8 draws of the states in Z15. R, X, E,
// O, T are scratch registers (XY and OY the YMM halves of X and O), K a
// mask register; Z10-Z14 hold constants, the others are broadcast from
// memory, so that only Z0-Z15 are used (VZEROUPPER cleans those). The levels are the high dwords of n + r, n the truncated
// |x| invStep + 0.5 and r the 32 random bits, clamped at 7.
#define Q4GROUP512(off, dst, R, X, XY, E, O, OY, T, K) \
	VPSRLQ        $30, Z15, R; \
	VPXORQ        Z15, R, R; \
	VPADDQ.BCST   q4gammas<>+56(SB), Z15, Z15; \
	VPMULLQ       Z12, R, R; \
	VPSRLQ        $27, R, T; \
	VPXORQ        T, R, R; \
	VPMULLQ.BCST  q4mul<>+8(SB), R, R; \
	VPSRLQ        $31, R, T; \
	VPXORQ        T, R, R; \
	VMOVDQU32     off(SI), X; \
	VPMOVD2M      X, K; \
	VPANDD.BCST   q4absmask<>(SB), X, X; \
	VPERMPS       X, Z10, X; \
	VEXTRACTF32X8 $1, X, OY; \
	VCVTPS2PD     XY, E; \
	VCVTPS2PD     OY, O; \
	VMULPD        Z13, E, E; \
	VMULPD        Z13, O, O; \
	VADDPD        Z14, E, E; \
	VADDPD        Z14, O, O; \
	VCVTTPD2UQQ   E, E; \
	VCVTTPD2UQQ   O, O; \
	VPANDQ.BCST   q4lo32<>(SB), R, T; \
	VPSRLQ        $32, R, R; \
	VPADDQ        T, E, E; \
	VPADDQ        R, O, O; \
	VPERMT2D      O, Z11, E; \
	VPMINUD.BCST  q4seven<>(SB), E, E; \
	VPORD.BCST    q4eight<>(SB), E, K, E; \
	VPSRLQ        $28, E, T; \
	VPORQ         T, E, E; \
	VPMOVQB       E, dst(DI)

// func quantize4AVX512(codes *byte, x *float32, n int, invStep float64, state uint64)
// quantize4AVX2 with AVX-512F and DQ; n a positive multiple of 16.
TEXT ·quantize4AVX512(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   q4z_done

	VPBROADCASTQ state+32(FP), Z15
	VPADDQ       q4gammas<>(SB), Z15, Z15 // s + k*gamma, k = 1..8
	VPBROADCASTQ q4mul<>+0(SB), Z12
	VMOVDQU64    q4perm16<>(SB), Z10
	VBROADCASTSD invStep+24(FP), Z13
	VBROADCASTSD q4half<>(SB), Z14
	VMOVDQU64    q4pick<>(SB), Z11

q4z_loop:
	Q4GROUP512(0, 0, Z0, Z1, Y1, Z2, Z3, Y3, Z4, K1)
	Q4GROUP512(64, 8, Z5, Z6, Y6, Z7, Z8, Y8, Z9, K2)
	ADDQ $128, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  q4z_loop

q4z_done:
	VZEROUPPER
	RET
