package main

// #include "capi.h"
import "C"

import (
	"context"
	"math"
	"time"
	"unsafe"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/transport"
)

// call is one collective call from C, validated: the communicator, the
// operation's name, and whether it is to be started (req non-NULL) or run.
type call struct {
	comm *sparcml.Comm
	p    *C.sparcml_comm
	op   string
	req  **C.sparcml_request
	// ctx bounds the operation: the communicator's sparcml_set_timeout
	// deadline when one is set, else none (the library's default applies).
	ctx context.Context
	// release, if set, runs once the call is over, whatever its outcome
	// (for a started call: when its request completes).
	release func()
}

// newCall resolves the communicator of a call. A NULL or finalized
// communicator fails on this rank only (there is no job to tell).
func newCall(p *C.sparcml_comm, op string, req **C.sparcml_request) (*call, C.int) {
	if req != nil {
		*req = nil
	}
	c, err := commOf(p)
	if err != nil {
		return nil, record(err, -1, op)
	}
	k := &call{comm: c, p: p, op: op, req: req, ctx: context.Background()}
	if req == nil {
		// A blocking call runs on the caller's thread, to which a call
		// from C is locked: the transports' waiters poll without yielding
		// the processor (transport.OnLockedThread).
		k.ctx = transport.OnLockedThread(k.ctx)
	}
	if t := float64(p.timeout); t > 0 {
		var cancel context.CancelFunc
		k.ctx, cancel = context.WithTimeout(k.ctx, time.Duration(math.Min(t, float64(math.MaxInt64/2)/1e9)*1e9))
		k.onRelease(cancel)
	}
	return k, statusOK
}

// onRelease adds f to what runs once the call is over.
func (k *call) onRelease(f func()) {
	prev := k.release
	if prev == nil {
		k.release = f
		return
	}
	k.release = func() { prev(); f() }
}

// invalid fails the call on every rank with an invalid-argument error.
func (k *call) invalid(format string, args ...any) C.int {
	return failNext(k.p, k.op, invalidf(format, args...))
}

// finish runs a blocking call's result or starts a request, and records
// its error. run is the blocking form, start the non-blocking one; after,
// if not nil, runs once the operation has succeeded (in the call that
// observes it: this one, or the sparcml_wait or sparcml_test completing
// the request).
func (k *call) finish(run func() error, start func() *sparcml.Request, after func() error) C.int {
	if k.req == nil {
		if k.release != nil {
			defer k.release()
		}
		err := run()
		if err == nil && after != nil {
			err = after()
		}
		if err != nil {
			return record(err, k.comm.Rank(), k.op)
		}
		return statusOK
	}
	return k.started(start(), after)
}

// elemSize is the size of dtype's elements, 0 for an unknown dtype.
func elemSize(dtype C.int) int {
	switch dtype {
	case C.SPARCML_FLOAT32:
		return 4
	case C.SPARCML_FLOAT64:
		return 8
	}
	return 0
}

// checkBuf checks that buf can hold count elements of size esize: not NULL
// unless empty, and a length the address space can hold.
func (k *call) checkBuf(name string, buf unsafe.Pointer, count C.size_t, esize int) (int, bool) {
	if uint64(count) > uint64(math.MaxInt/esize) {
		k.invalid("%s: count %d is too large", name, uint64(count))
		return 0, false
	}
	if buf == nil && count > 0 {
		k.invalid("%s is NULL (count %d)", name, uint64(count))
		return 0, false
	}
	return int(count), true
}
