// Command capi is the C ABI of sparcml, built as a shared library with
// `make lib` (go build -buildmode=c-shared): build/lib/libsparcml.so,
// against the hand-written header include/sparcml.h, which documents every
// function. sparcml.c defines the public functions against that header;
// those that need the runtime call the Go exports of this package.
//
// Handles: a communicator or request is a C-allocated struct holding a
// runtime/cgo.Handle of the Go object, so C never holds a Go pointer. Buffers
// stay in C memory and are used in place: the exports wrap them with
// unsafe.Slice for the call (or, for non-blocking calls, until the request
// completes, as the header requires of the caller).
//
// Errors: every export returns a status code and records the error text
// of the calling thread in sparcml.c's thread-local record (a cgo call from
// Go runs on the thread that called into Go, so the record is the C
// caller's). Arguments found invalid here fail the operation on every
// rank too (Comm.FailNext), so one bad rank never leaves the others
// waiting for their deadline.
package main

// #cgo CFLAGS: -I${SRCDIR}/../include
// #include "capi.h"
import "C"

func main() {}

// version is the library's version, set at build time with
// -ldflags "-X main.version=..." (the Makefile's VERSION, git describe).
var version = "dev"

// versionC is version as a C string, made once and never freed.
var versionC = C.CString(version)

//export sparcmlGoLibraryVersion
func sparcmlGoLibraryVersion() *C.char { return versionC }
