package main

import "unsafe"

// rawBytes views a slice of floats as its bytes, without copying: the
// plain-socket baseline of `bench --op p2p --baseline` writes and reads
// the same memory our transport does.
func rawBytes[T ~float32 | ~float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}
