package main

// #include "capi.h"
import "C"

import (
	"math"
	"unsafe"

	"github.com/sparcml/sparcml"
)

// reductionOf maps a C reduction to the library's.
func reductionOf(op C.int) (sparcml.ReduceOp, bool) {
	switch op {
	case C.SPARCML_SUM:
		return sparcml.Sum, true
	case C.SPARCML_AVG:
		return sparcml.Avg, true
	case C.SPARCML_MIN:
		return sparcml.Min, true
	case C.SPARCML_MAX:
		return sparcml.Max, true
	}
	return 0, false
}

// prologue resolves the communicator, dtype and reduction shared by the
// reducing collectives; ok is false once the error is recorded.
func prologue(p *C.sparcml_comm, op string, dtype, redOp C.int, req **C.sparcml_request) (k *call, esize int, red sparcml.ReduceOp, status C.int) {
	k, status = newCall(p, op, req)
	if k == nil {
		return nil, 0, red, status
	}
	if esize = elemSize(dtype); esize == 0 {
		return nil, 0, red, k.invalid("unknown dtype %d (want SPARCML_FLOAT32 or SPARCML_FLOAT64)", int(dtype))
	}
	var ok bool
	if red, ok = reductionOf(redOp); !ok {
		return nil, 0, red, k.invalid("unknown op %d (want SPARCML_SUM, SPARCML_AVG, SPARCML_MIN or SPARCML_MAX)", int(redOp))
	}
	return k, esize, red, statusOK
}

//export sparcmlGoAllreduce
func sparcmlGoAllreduce(p *C.sparcml_comm, buf unsafe.Pointer, count C.size_t, dtype, redOp C.int, req **C.sparcml_request) (status C.int) {
	defer guard(&status, "allreduce")
	k, esize, red, status := prologue(p, "allreduce", dtype, redOp, req)
	if k == nil {
		return status
	}
	n, ok := k.checkBuf("buf", buf, count, esize)
	if !ok {
		return statusInvalid
	}
	if esize == 4 {
		return allreduce(k, unsafe.Slice((*float32)(buf), n), red)
	}
	return allreduce(k, unsafe.Slice((*float64)(buf), n), red)
}

func allreduce[T sparcml.Float](k *call, data []T, red sparcml.ReduceOp) C.int {
	ctx := k.ctx
	return k.finish(
		func() error { return sparcml.Allreduce(ctx, k.comm, data, red) },
		func() *sparcml.Request { return sparcml.StartAllreduce(ctx, k.comm, data, red) },
		nil)
}

//export sparcmlGoReduceScatter
func sparcmlGoReduceScatter(p *C.sparcml_comm, sendbuf, recvbuf unsafe.Pointer, recvcount C.size_t, dtype, redOp C.int, req **C.sparcml_request) (status C.int) {
	defer guard(&status, "reduce-scatter")
	k, esize, red, status := prologue(p, "reduce-scatter", dtype, redOp, req)
	if k == nil {
		return status
	}
	m, ok := k.checkBuf("recvbuf", recvbuf, recvcount, esize*k.comm.Size())
	if !ok {
		return statusInvalid
	}
	n := m * k.comm.Size()
	if sendbuf == nil && n > 0 {
		return k.invalid("sendbuf is NULL (count %d)", n)
	}
	if esize == 4 {
		return reduceScatter(k, unsafe.Slice((*float32)(sendbuf), n), unsafe.Slice((*float32)(recvbuf), m), red)
	}
	return reduceScatter(k, unsafe.Slice((*float64)(sendbuf), n), unsafe.Slice((*float64)(recvbuf), m), red)
}

func reduceScatter[T sparcml.Float](k *call, in, out []T, red sparcml.ReduceOp) C.int {
	ctx := k.ctx
	return k.finish(
		func() error { return sparcml.ReduceScatter(ctx, k.comm, in, out, red) },
		func() *sparcml.Request { return sparcml.StartReduceScatter(ctx, k.comm, in, out, red) },
		nil)
}

//export sparcmlGoAllgather
func sparcmlGoAllgather(p *C.sparcml_comm, sendbuf unsafe.Pointer, sendcount C.size_t, recvbuf unsafe.Pointer, recvcounts *C.size_t, dtype C.int, req **C.sparcml_request) (status C.int) {
	op := "allgather"
	if recvcounts != nil {
		op = "allgatherv"
	}
	defer guard(&status, op)
	k, status := newCall(p, op, req)
	if k == nil {
		return status
	}
	esize := elemSize(dtype)
	if esize == 0 {
		return k.invalid("unknown dtype %d (want SPARCML_FLOAT32 or SPARCML_FLOAT64)", int(dtype))
	}
	n, ok := k.checkBuf("sendbuf", sendbuf, sendcount, esize)
	if !ok {
		return statusInvalid
	}
	var counts []int
	total := n * k.comm.Size()
	if recvcounts != nil {
		var msg string
		if counts, total, msg = goCounts(recvcounts, k.comm.Size(), esize); msg != "" {
			return k.invalid("%s", msg)
		}
		if counts[k.comm.Rank()] != n {
			return k.invalid("sendcount %d differs from recvcounts[%d] = %d", n, k.comm.Rank(), counts[k.comm.Rank()])
		}
	} else if n > math.MaxInt/(esize*k.comm.Size()) {
		return k.invalid("sendcount %d is too large", n)
	}
	if recvbuf == nil && total > 0 {
		return k.invalid("recvbuf is NULL (count %d)", total)
	}
	if esize == 4 {
		return allgather(k, unsafe.Slice((*float32)(sendbuf), n), unsafe.Slice((*float32)(recvbuf), total), counts)
	}
	return allgather(k, unsafe.Slice((*float64)(sendbuf), n), unsafe.Slice((*float64)(recvbuf), total), counts)
}

// goCounts copies size C counts into Go and sums them, or says why they
// are invalid.
func goCounts(recvcounts *C.size_t, size, esize int) ([]int, int, string) {
	cs := unsafe.Slice(recvcounts, size)
	counts := make([]int, size)
	total := 0
	for r, c := range cs {
		if uint64(c) > uint64(math.MaxInt/esize-total) {
			return nil, 0, "recvcounts sum to more than the address space"
		}
		counts[r] = int(c)
		total += int(c)
	}
	return counts, total, ""
}

func allgather[T sparcml.Float](k *call, in, out []T, counts []int) C.int {
	ctx := k.ctx
	if counts != nil {
		return k.finish(
			func() error { return sparcml.Allgatherv(ctx, k.comm, in, out, counts) },
			func() *sparcml.Request { return sparcml.StartAllgatherv(ctx, k.comm, in, out, counts) },
			nil)
	}
	return k.finish(
		func() error { return sparcml.Allgather(ctx, k.comm, in, out) },
		func() *sparcml.Request { return sparcml.StartAllgather(ctx, k.comm, in, out) },
		nil)
}

//export sparcmlGoBroadcast
func sparcmlGoBroadcast(p *C.sparcml_comm, buf unsafe.Pointer, count C.size_t, dtype, root C.int, req **C.sparcml_request) (status C.int) {
	defer guard(&status, "broadcast")
	k, status := newCall(p, "broadcast", req)
	if k == nil {
		return status
	}
	esize := elemSize(dtype)
	if esize == 0 {
		return k.invalid("unknown dtype %d (want SPARCML_FLOAT32 or SPARCML_FLOAT64)", int(dtype))
	}
	n, ok := k.checkBuf("buf", buf, count, esize)
	if !ok {
		return statusInvalid
	}
	if esize == 4 {
		return broadcast(k, unsafe.Slice((*float32)(buf), n), int(root))
	}
	return broadcast(k, unsafe.Slice((*float64)(buf), n), int(root))
}

func broadcast[T sparcml.Float](k *call, data []T, root int) C.int {
	ctx := k.ctx
	return k.finish(
		func() error { return sparcml.Broadcast(ctx, k.comm, data, root) },
		func() *sparcml.Request { return sparcml.StartBroadcast(ctx, k.comm, data, root) },
		nil)
}

//export sparcmlGoBarrier
func sparcmlGoBarrier(p *C.sparcml_comm, req **C.sparcml_request) (status C.int) {
	defer guard(&status, "barrier")
	k, status := newCall(p, "barrier", req)
	if k == nil {
		return status
	}
	ctx := k.ctx
	return k.finish(
		func() error { return k.comm.Barrier(ctx) },
		func() *sparcml.Request { return k.comm.StartBarrier(ctx) },
		nil)
}
