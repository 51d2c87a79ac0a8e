package main

// #include "capi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime/cgo"
	"unsafe"

	"github.com/sparcml/sparcml"
)

// Point-to-point messages, sub-communicators and per-communicator
// deadlines: what a framework's process group (sparcml.torch's backend)
// needs beyond the collectives.

//export sparcmlGoP2P
func sparcmlGoP2P(p *C.sparcml_comm, buf unsafe.Pointer, count C.size_t, dtype, peer, recv C.int, req **C.sparcml_request) (status C.int) {
	op := "send"
	if recv != 0 {
		op = "recv"
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
	if peer < 0 || int(peer) >= k.comm.Size() || int(peer) == k.comm.Rank() {
		// Local: the peer named is not waiting for anything of ours.
		return record(invalidf("peer %d is not another rank of %d", int(peer), k.comm.Size()), k.comm.Rank(), op)
	}
	n, ok := k.checkBuf("buf", buf, count, esize)
	if !ok {
		return statusInvalid
	}
	if esize == 4 {
		return p2p(k, unsafe.Slice((*float32)(buf), n), int(peer), recv != 0)
	}
	return p2p(k, unsafe.Slice((*float64)(buf), n), int(peer), recv != 0)
}

func p2p[T sparcml.Float](k *call, data []T, peer int, recv bool) C.int {
	if recv {
		return k.started(sparcml.StartRecv(k.ctx, k.comm, data, peer), nil)
	}
	return k.started(sparcml.StartSend(k.ctx, k.comm, data, peer), nil)
}

//export sparcmlGoSplit
func sparcmlGoSplit(p *C.sparcml_comm, color, key C.int, out **C.sparcml_comm) (status C.int) {
	defer guard(&status, "split")
	k, status := newCall(p, "split", nil)
	if k == nil {
		return status
	}
	if k.release != nil {
		defer k.release()
	}
	if out == nil {
		return k.invalid("newcomm (the output pointer) is NULL")
	}
	*out = nil
	sub, err := k.comm.Split(k.ctx, int(color), int(key))
	if err != nil {
		return record(err, k.comm.Rank(), "split")
	}
	if sub == nil {
		return statusOK // a negative color: no sub-communicator
	}
	q := (*C.sparcml_comm)(C.calloc(1, C.size_t(unsafe.Sizeof(C.sparcml_comm{}))))
	if q == nil {
		sub.Close()
		return record(fmt.Errorf("%w: allocating the communicator", errNoMem), k.comm.Rank(), "split")
	}
	q.handle = C.uintptr_t(cgo.NewHandle(sub))
	q.rank, q.size, q.timeout = C.int(sub.Rank()), C.int(sub.Size()), p.timeout
	*out = q
	return statusOK
}

//export sparcmlGoSetTimeout
func sparcmlGoSetTimeout(p *C.sparcml_comm, seconds C.double) (status C.int) {
	defer guard(&status, "set-timeout")
	if _, err := commOf(p); err != nil {
		return record(err, -1, "set-timeout")
	}
	if math.IsNaN(float64(seconds)) {
		return record(invalidf("timeout is NaN"), int(p.rank), "set-timeout")
	}
	p.timeout = seconds
	return statusOK
}

// compressorStart starts a compressed reduction of buf.
func (z *compressor) start(buf unsafe.Pointer, count int, req **C.sparcml_request) C.int {
	k := &call{comm: z.comm, op: opCompressorReduce, req: req, ctx: context.Background()}
	if z.f32 != nil {
		return k.started(compressPending{z.f32.Start(k.ctx, unsafe.Slice((*float32)(buf), count))}, nil)
	}
	return k.started(compressPending{z.f64.Start(k.ctx, unsafe.Slice((*float64)(buf), count))}, nil)
}
