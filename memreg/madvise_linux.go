package memreg

import "golang.org/x/sys/unix"

// dontFork keeps the pages out of a forked child: a copy-on-write fault in
// the parent would move a registered page away from the device.
func dontFork(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTFORK) }
