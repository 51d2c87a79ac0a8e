package main

// #include "capi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"

	"github.com/sparcml/sparcml"
)

// pending is an operation in flight: a *sparcml.Request, or a compressed
// reduction (compressPending).
type pending interface {
	Wait(ctx context.Context) error
	Test() (bool, error)
	Seq() uint64
}

// compressPending adapts a started compressed reduction to pending.
type compressPending struct{ r *sparcml.CompressRequest }

func (p compressPending) Wait(ctx context.Context) error {
	select {
	case <-p.r.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	_, err := p.r.Wait(context.Background())
	return err
}

func (p compressPending) Test() (bool, error) {
	select {
	case <-p.r.Done():
		_, err := p.r.Wait(context.Background())
		return true, err
	default:
		return false, nil
	}
}

// Seq is never 0: a compressed reduction is never refused before it
// starts (its failures are reported by the wait or test).
func (p compressPending) Seq() uint64 { return 1 }

// request is the Go side of a sparcml_request.
type request struct {
	r     pending
	rank  int
	op    string
	after func() error // run once the operation has succeeded
	// release undoes what the start claimed (a result marked busy),
	// whatever the outcome.
	release func()

	once sync.Once
	err  error
}

// started hands a started operation to C as a request.
func (k *call) started(r pending, after func() error) C.int {
	if done, err := r.Test(); done && err != nil && r.Seq() == 0 {
		// Refused before it started (a closed communicator): no request
		// to wait for. An operation that started and already failed is
		// reported by the wait or test that completes its request.
		if k.release != nil {
			k.release()
		}
		return record(err, k.comm.Rank(), k.op)
	}
	p := (*C.sparcml_request)(C.malloc(C.size_t(unsafe.Sizeof(C.sparcml_request{}))))
	if p == nil {
		// The operation runs anyway; wait for it here rather than let
		// it write into buffers the caller believes free.
		err := r.Wait(context.Background())
		if k.release != nil {
			k.release()
		}
		if err == nil {
			err = fmt.Errorf("%w: allocating the request", errNoMem)
		}
		return record(err, k.comm.Rank(), k.op)
	}
	p.handle = C.uintptr_t(cgo.NewHandle(&request{r: r, rank: k.comm.Rank(), op: k.op, after: after, release: k.release}))
	*k.req = p
	return statusOK
}

// complete finishes a request whose operation has completed with err:
// runs its after step once, releases the handle and the C struct, and
// records the outcome.
func complete(pp **C.sparcml_request, rq *request, err error) C.int {
	rq.once.Do(func() {
		if err == nil && rq.after != nil {
			err = rq.after()
		}
		if rq.release != nil {
			rq.release()
		}
		rq.err = err
	})
	cgo.Handle((*pp).handle).Delete()
	C.free(unsafe.Pointer(*pp))
	*pp = nil
	if rq.err != nil {
		return record(rq.err, rq.rank, rq.op)
	}
	return statusOK
}

func requestOf(pp **C.sparcml_request) (*request, bool) {
	rq, ok := cgo.Handle((*pp).handle).Value().(*request)
	return rq, ok
}

//export sparcmlGoWait
func sparcmlGoWait(pp **C.sparcml_request, timeout C.double) (status C.int) {
	defer guard(&status, "wait")
	rq, ok := requestOf(pp)
	if !ok {
		return record(invalidf("not a request handle"), -1, "wait")
	}
	ctx := context.Background()
	if t := float64(timeout); t >= 0 {
		d := time.Duration(math.Min(t, float64(math.MaxInt64/2)/1e9) * 1e9)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	_ = rq.r.Wait(ctx) // the outcome is Test's: Wait may see ctx end and completion together
	done, err := rq.r.Test()
	if !done {
		return record(&sparcml.Error{Rank: rq.rank, Peer: -1, Op: rq.op, Seq: rq.r.Seq(),
			Err: fmt.Errorf("%w after %gs of waiting (the operation continues; its buffers are still in use)", errNotDone, float64(timeout))},
			rq.rank, rq.op)
	}
	return complete(pp, rq, err)
}

//export sparcmlGoTest
func sparcmlGoTest(pp **C.sparcml_request, done *C.int) (status C.int) {
	defer guard(&status, "test")
	rq, ok := requestOf(pp)
	if !ok {
		return record(invalidf("not a request handle"), -1, "test")
	}
	finished, err := rq.r.Test()
	if !finished {
		return statusOK
	}
	*done = 1
	return complete(pp, rq, err)
}
