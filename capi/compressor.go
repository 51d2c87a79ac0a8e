package main

// #include "capi.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"unsafe"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/apihook"
)

// Operation names of the compressor's calls in errors. A reduction's
// collective is the sparse allreduce, which is what the other ranks name
// when one rank's reduction fails.
const (
	opCompressorCreate = "compressor-create"
	opCompressorReduce = "sparse-allreduce"
	opCompressorGlobal = "global-topk" // a reduction of SPARCML_SCOPE_GLOBAL
)

// compressor is the Go side of a sparcml_compressor: a Compressor of one
// element type (the other is nil).
type compressor struct {
	comm  *sparcml.Comm
	count int
	f32   *sparcml.Compressor[float32]
	f64   *sparcml.Compressor[float64]
}

// compressorConfig is the library's configuration of the C arguments, or
// the reason they are invalid.
func compressorConfig(density C.double, q, errorFeedback, method, scope C.int) (sparcml.CompressorConfig, error) {
	d := float64(density)
	if !(d > 0 && d <= 1) {
		return sparcml.CompressorConfig{}, invalidf("density %v is outside (0, 1]", d)
	}
	kind := sparcml.Quant(q)
	if q < 0 || !kind.Valid() {
		return sparcml.CompressorConfig{}, invalidf("unknown quant %d (want SPARCML_QUANT_NONE, _FP16, _BF16, _Q8, _Q4 or _Q2)", int(q))
	}
	m := compress.Method(method)
	if method < 0 || method > C.SPARCML_SELECT_RANDOM {
		return sparcml.CompressorConfig{}, invalidf("unknown method %d (want SPARCML_SELECT_EXACT, _SAMPLED, _REUSE or _RANDOM)", int(method))
	}
	if scope != C.SPARCML_SCOPE_UNION && scope != C.SPARCML_SCOPE_GLOBAL {
		return sparcml.CompressorConfig{}, invalidf("unknown scope %d (want SPARCML_SCOPE_UNION or _GLOBAL)", int(scope))
	}
	return sparcml.CompressorConfig{
		Sparsify: compress.Config{Density: d, Method: m, NoErrorFeedback: errorFeedback == 0},
		Quant:    kind,
		Scope:    compress.Scope(scope),
	}, nil
}

//export sparcmlGoCompressorCreate
func sparcmlGoCompressorCreate(p *C.sparcml_comm, count C.size_t, dtype C.int, density C.double, q, errorFeedback, method C.int,
	out **C.sparcml_compressor) (status C.int) {
	return sparcmlGoCompressorCreateScoped(p, count, dtype, density, q, errorFeedback, method, C.SPARCML_SCOPE_UNION, out)
}

//export sparcmlGoCompressorCreateScoped
func sparcmlGoCompressorCreateScoped(p *C.sparcml_comm, count C.size_t, dtype C.int, density C.double, q, errorFeedback, method, scope C.int,
	out **C.sparcml_compressor) (status C.int) {
	defer guard(&status, opCompressorCreate)
	c, err := commOf(p)
	if err != nil {
		return record(err, -1, opCompressorCreate)
	}
	if out == nil {
		return failNext(p, opCompressorCreate, invalidf("comp (the output pointer) is NULL"))
	}
	*out = nil
	z, err := newCompressor(c, count, dtype, density, q, errorFeedback, method, scope)
	if err != nil {
		return failNext(p, opCompressorCreate, err)
	}
	if err := agree(c, count, dtype, z.config()); err != nil {
		return record(err, c.Rank(), opCompressorCreate)
	}
	h := (*C.sparcml_compressor)(C.calloc(1, C.size_t(unsafe.Sizeof(C.sparcml_compressor{}))))
	if h == nil {
		return record(fmt.Errorf("%w: allocating the compressor", errNoMem), c.Rank(), opCompressorCreate)
	}
	h.handle = C.uintptr_t(cgo.NewHandle(z))
	*out = h
	return statusOK
}

// newCompressor checks the arguments of a create and makes the Go
// Compressor, with its residual at zero.
func newCompressor(c *sparcml.Comm, count C.size_t, dtype C.int, density C.double, q, errorFeedback, method, scope C.int) (*compressor, error) {
	cfg, err := compressorConfig(density, q, errorFeedback, method, scope)
	if err != nil {
		return nil, err
	}
	esize := elemSize(dtype)
	if esize == 0 {
		return nil, invalidf("unknown dtype %d (want SPARCML_FLOAT32 or SPARCML_FLOAT64)", int(dtype))
	}
	if uint64(count) > 1<<32 {
		return nil, invalidf("count %d exceeds 2^32 (the sparse vectors' dimension)", uint64(count))
	}
	z := &compressor{comm: c, count: int(count)}
	if esize == 4 {
		z.f32, err = sparcml.NewCompressor[float32](c, int(count), cfg)
	} else {
		z.f64, err = sparcml.NewCompressor[float64](c, int(count), cfg)
	}
	return z, err
}

func (z *compressor) config() sparcml.CompressorConfig {
	if z.f32 != nil {
		return z.f32.Config()
	}
	return z.f64.Config()
}

// agree checks that every rank created its compressor with the same
// count, element type and configuration: ranks that differ would select
// different numbers of entries, or reduce vectors of different
// dimensions, without any collective noticing. Every rank sees every
// rank's arguments, so all fail alike.
func agree(c *sparcml.Comm, count C.size_t, dtype C.int, cfg sparcml.CompressorConfig) error {
	mine := []float64{float64(count), float64(dtype), cfg.Sparsify.Density, float64(cfg.Quant),
		float64(cfg.Sparsify.Method), 0, float64(cfg.Scope)}
	if cfg.Sparsify.NoErrorFeedback {
		mine[5] = 1
	}
	names := []string{"count", "dtype", "density", "quant", "method", "error feedback off", "scope"}
	all := make([]float64, len(mine)*c.Size())
	if err := sparcml.Allgather(context.Background(), c, mine, all); err != nil {
		var te *sparcml.Error
		if errors.As(err, &te) {
			named := *te // the create failed, not an allgather of the caller's
			named.Op = opCompressorCreate
			return &named
		}
		return err
	}
	for r := 0; r < c.Size(); r++ {
		for i, v := range all[r*len(mine) : (r+1)*len(mine)] {
			if v != all[i] {
				return &sparcml.Error{Rank: c.Rank(), Peer: r, Op: opCompressorCreate, Err: fmt.Errorf(
					"%w: rank %d has %s %v, rank 0 has %v (every rank must create its compressor alike)",
					sparcml.ErrMismatch, r, names[i], v, all[i])}
			}
		}
	}
	return nil
}

// compressorOf returns the Go compressor of a C handle.
func compressorOf(h *C.sparcml_compressor) (*compressor, error) {
	if h == nil {
		return nil, invalidf("compressor is NULL")
	}
	if h.handle == 0 {
		return nil, invalidf("compressor already destroyed")
	}
	z, ok := cgo.Handle(h.handle).Value().(*compressor)
	if !ok {
		return nil, invalidf("not a compressor handle")
	}
	return z, nil
}

//export sparcmlGoCompressorReduce
func sparcmlGoCompressorReduce(h *C.sparcml_compressor, buf unsafe.Pointer, count C.size_t, req **C.sparcml_request) (status C.int) {
	defer guard(&status, opCompressorReduce)
	if req != nil {
		*req = nil
	}
	z, err := compressorOf(h)
	if err != nil {
		return record(err, -1, opCompressorReduce) // no communicator to tell
	}
	if buf == nil && count > 0 {
		return z.invalid("buf is NULL (count %d)", uint64(count))
	}
	if uint64(count) != uint64(z.count) {
		return z.invalid("count %d for a compressor of %d", uint64(count), z.count)
	}
	if req != nil {
		return z.start(buf, int(count), req)
	}
	ctx := context.Background()
	if z.f32 != nil {
		_, err = z.f32.Reduce(ctx, unsafe.Slice((*float32)(buf), int(count)))
	} else {
		_, err = z.f64.Reduce(ctx, unsafe.Slice((*float64)(buf), int(count)))
	}
	if err != nil {
		return record(err, z.comm.Rank(), opCompressorReduce) // the error names its collective
	}
	return statusOK
}

// invalid fails the reduction on every rank, in the place of the
// collective it would have started.
func (z *compressor) invalid(format string, args ...any) C.int {
	op := opCompressorReduce
	if z.config().Scope == compress.ScopeGlobal {
		op = opCompressorGlobal
	}
	return record(failNextOn(z.comm, op, invalidf(format, args...)), z.comm.Rank(), op)
}

//export sparcmlGoCompressorResidual
func sparcmlGoCompressorResidual(h *C.sparcml_compressor, out unsafe.Pointer, count C.size_t) (status C.int) {
	const op = "compressor-residual"
	defer guard(&status, op)
	z, err := compressorOf(h)
	if err != nil {
		return record(err, -1, op)
	}
	switch {
	case uint64(count) != uint64(z.count):
		return record(invalidf("count %d for a compressor of %d", uint64(count), z.count), z.comm.Rank(), op)
	case out == nil && count > 0:
		return record(invalidf("out is NULL (count %d)", uint64(count)), z.comm.Rank(), op)
	}
	if z.f32 != nil {
		residual(unsafe.Slice((*float32)(out), z.count), apihook.Get[func(*sparcml.Compressor[float32]) *compress.Sparsifier[float32]]()(z.f32).Residual())
	} else {
		residual(unsafe.Slice((*float64)(out), z.count), apihook.Get[func(*sparcml.Compressor[float64]) *compress.Sparsifier[float64]]()(z.f64).Residual())
	}
	return statusOK
}

// residual copies the residual into out: zeros without error feedback,
// where the Sparsifier keeps none.
func residual[T sparcml.Float](out, r []T) {
	if copy(out, r) < len(out) {
		clear(out[len(r):])
	}
}

//export sparcmlGoCompressorDestroy
func sparcmlGoCompressorDestroy(h *C.sparcml_compressor) (status C.int) {
	const op = "compressor-destroy"
	defer guard(&status, op)
	if _, err := compressorOf(h); err != nil {
		return record(err, -1, op)
	}
	cgo.Handle(h.handle).Delete()
	h.handle = 0
	C.free(unsafe.Pointer(h))
	return statusOK
}
