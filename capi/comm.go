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
	"github.com/sparcml/sparcml/internal/apihook"
)

// commOf returns the Go communicator of a C handle.
func commOf(p *C.sparcml_comm) (*sparcml.Comm, error) {
	if p == nil {
		return nil, invalidf("communicator is NULL")
	}
	if p.handle == 0 {
		return nil, fmt.Errorf("%w: communicator already finalized", sparcml.ErrClosed)
	}
	c, ok := cgo.Handle(p.handle).Value().(*sparcml.Comm)
	if !ok {
		return nil, invalidf("not a communicator handle")
	}
	return c, nil
}

//export sparcmlGoInit
func sparcmlGoInit(out **C.sparcml_comm, rank, size C.int, addr, token *C.char) (status C.int) {
	defer guard(&status, "init")
	if out == nil {
		return record(invalidf("comm (the output pointer) is NULL"), int(rank), "init")
	}
	*out = nil
	var opts []sparcml.Option
	if rank >= 0 || size >= 0 {
		opts = append(opts, sparcml.WithRank(int(rank), int(size)))
	}
	if addr != nil {
		opts = append(opts, sparcml.WithAddr(C.GoString(addr)))
	}
	if token != nil {
		opts = append(opts, sparcml.WithToken(C.GoString(token)))
	}
	comm, err := sparcml.Init(context.Background(), opts...)
	if err != nil {
		return record(fmt.Errorf("%w: %w", errInit, err), int(rank), "init")
	}
	p := (*C.sparcml_comm)(C.calloc(1, C.size_t(unsafe.Sizeof(C.sparcml_comm{}))))
	if p == nil {
		comm.Abort(errors.New("the C binding ran out of memory at init"))
		comm.Close()
		return record(fmt.Errorf("%w: allocating the communicator", errNoMem), comm.Rank(), "init")
	}
	p.handle = C.uintptr_t(cgo.NewHandle(comm))
	p.rank, p.size = C.int(comm.Rank()), C.int(comm.Size())
	*out = p
	return statusOK
}

//export sparcmlGoFinalize
func sparcmlGoFinalize(p *C.sparcml_comm) (status C.int) {
	defer guard(&status, "finalize")
	c, err := commOf(p)
	if err != nil {
		return record(err, int(p.rank), "finalize")
	}
	err = c.Close()
	cgo.Handle(p.handle).Delete()
	p.handle = 0
	C.free(unsafe.Pointer(p))
	if err != nil {
		return record(err, c.Rank(), "finalize")
	}
	return statusOK
}

//export sparcmlGoAbort
func sparcmlGoAbort(p *C.sparcml_comm, reason *C.char) (status C.int) {
	defer guard(&status, "abort")
	c, err := commOf(p)
	if err != nil {
		return record(err, -1, "abort")
	}
	why := "aborted by the application"
	if reason != nil {
		why = "aborted by the application: " + C.GoString(reason)
	}
	c.Abort(errors.New(why))
	return statusOK
}

//export sparcmlGoFail
func sparcmlGoFail(p *C.sparcml_comm, operation, reason *C.char) (status C.int) {
	defer guard(&status, "fail")
	op := "operation"
	if operation != nil {
		op = C.GoString(operation)
	}
	why := "failed by the caller"
	if reason != nil {
		why = C.GoString(reason)
	}
	return failNext(p, op, errors.New(why))
}

// failNext fails the next operation on every rank with err (see
// failNextOn) and records it as this thread's error: the path of every
// argument check of this package, so one rank's bad call fails the
// collective everywhere. A NULL or finalized communicator only fails here.
// The recorded status is SPARCML_ERR_INVALID unless the communicator
// itself is unusable.
func failNext(p *C.sparcml_comm, op string, err error) C.int {
	if !errors.Is(err, sparcml.ErrInvalid) {
		err = fmt.Errorf("%w: %w", sparcml.ErrInvalid, err)
	}
	c, cerr := commOf(p)
	if cerr != nil {
		return record(cerr, -1, op)
	}
	return record(failNextOn(c, op, err), c.Rank(), op)
}

// failNextOn fails c's next operation on every rank with err, without
// running it, and returns the error this rank reports: the other ranks'
// collective at that point of the start order fails at once, naming this
// rank and err, instead of waiting for its deadline. The communicator
// stays usable. Not API: the hook is package sparcml's (internal/apihook).
func failNextOn(c *sparcml.Comm, kind string, err error) error {
	return apihook.Get[func(*sparcml.Comm, string, error) error]()(c, kind, err)
}
