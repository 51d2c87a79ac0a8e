package transport

import "context"

// lockedThreadKey marks the context of a call whose goroutine is locked to
// its OS thread.
type lockedThreadKey struct{}

// OnLockedThread returns ctx marked as the context of a blocking call whose
// goroutine is locked to its OS thread: a call from C or Python through
// the C ABI (a cgo callback always is), or a goroutine that called
// runtime.LockOSThread. A waiter that polls (SetWaiter) must not yield
// with runtime.Gosched there: a locked goroutine that yields hands its
// processor to another thread and sleeps until that thread hands it back,
// two thread switches for each yield (python/tools/call_bench.py;
// docs/PERFORMANCE.md, the cost of a call).
func OnLockedThread(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockedThreadKey{}, true)
}

// LockedThread reports whether ctx was marked by OnLockedThread.
func LockedThread(ctx context.Context) bool {
	locked, _ := ctx.Value(lockedThreadKey{}).(bool)
	return locked
}
