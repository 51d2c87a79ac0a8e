package transport

import (
	"bytes"
	"strings"
	"testing"
)

func TestDescRoundTrip(t *testing.T) {
	for _, d := range []Desc{
		{},
		{Kind: OpAllreduce, DType: 1, Reduce: 2, Algo: 3, Root: -1, Count: 1 << 40, Param: 1<<33 | 4},
		{Kind: OpKind(255), DType: 255, Reduce: 255, Algo: 255, Root: -1 << 31, Count: ^uint64(0), Param: ^uint64(0)},
	} {
		var b [DescSize]byte
		EncodeDesc(b[:], d)
		if got := DecodeDesc(b[:]); got != d {
			t.Fatalf("DecodeDesc(EncodeDesc(%+v)) = %+v", d, got)
		}
	}
}

// TestDescStringNumbers: the transport prints the fields it does not
// interpret as numbers.
func TestDescStringNumbers(t *testing.T) {
	s := Desc{Kind: OpBroadcast, DType: 2, Reduce: 1, Algo: 8, Root: 3, Count: 10, Param: 0x104}.String()
	want := "broadcast(dtype=2 reduce=1 algo=8 root=3 count=10 param=0x104)"
	if s != want {
		t.Fatalf("String = %q, want %q", s, want)
	}
	if !strings.HasPrefix(Desc{Kind: OpKind(200)}.String(), "op(200)(") {
		t.Fatalf("unknown kind prints as %q", Desc{Kind: OpKind(200)}.String())
	}
}

// FuzzDecodeDesc: every DescSize bytes are a descriptor, and encoding it
// gives the same bytes back (so no two encodings compare equal by mistake).
func FuzzDecodeDesc(f *testing.F) {
	var b [DescSize]byte
	EncodeDesc(b[:], Desc{Kind: OpSparseAllreduce, DType: 1, Algo: 5, Count: 1 << 20, Param: 4})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < DescSize {
			return
		}
		d := DecodeDesc(in)
		var again [DescSize]byte
		EncodeDesc(again[:], d)
		if !bytes.Equal(again[:], in[:DescSize]) {
			t.Fatalf("re-encoding %+v gives %x, input %x", d, again, in[:DescSize])
		}
	})
}
