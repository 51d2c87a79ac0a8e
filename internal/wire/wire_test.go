package wire

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/sparcml/sparcml/transport"
)

var testDesc = transport.Desc{Kind: transport.OpAllreduce, DType: 1, Algo: 2, Count: 9, Param: 4}

func TestHeaderRoundTrip(t *testing.T) {
	headers := []Header{
		{Kind: Data, Tag: transport.Tag{Comm: 1, Seq: 2, Step: 3}, Desc: testDesc, Length: 1 << 20},
		{Kind: Data, Tag: transport.Tag{Comm: ^uint32(0), Seq: ^uint64(0), Step: ^uint32(0)},
			Desc: transport.Desc{Kind: transport.OpSparseAllreduce, DType: 255, Reduce: 3, Algo: 9, Root: -1, Count: ^uint64(0), Param: ^uint64(0) - 1}, Length: 0},
		{Kind: FailOp, Tag: transport.Tag{Comm: 5, Seq: 6}, Length: MaxReasonLen},
		{Kind: Goodbye},
	}
	for _, h := range headers {
		var b [HeaderSize]byte
		EncodeHeader(b[:], &h)
		got, err := DecodeHeader(b[:], 1<<20)
		if err != nil || got != h {
			t.Errorf("DecodeHeader(EncodeHeader(%+v)) = %+v, %v", h, got, err)
		}
		var r [RingHeaderSize]byte
		EncodeRingHeader(r[:], &h)
		if got, err := DecodeRingHeader(r[:], 1<<20); err != nil || got != h {
			t.Errorf("DecodeRingHeader(EncodeRingHeader(%+v)) = %+v, %v", h, got, err)
		}
		if !bytes.Equal(r[:HeaderSize], b[:]) {
			t.Errorf("%+v: a ring header does not start with the stream header", h)
		}
	}
	rndv := Header{Kind: Rendezvous, Tag: transport.Tag{Seq: 2}, Desc: testDesc, Length: 100, Iovs: 3, Slot: 7, Gen: 1<<20 - 1}
	var r [RingHeaderSize]byte
	EncodeRingHeader(r[:], &rndv)
	if got, err := DecodeRingHeader(r[:], 1<<20); err != nil || got != rndv {
		t.Errorf("DecodeRingHeader(EncodeRingHeader(%+v)) = %+v, %v", rndv, got, err)
	}
}

// TestHeaderLimits: a header beyond its kind's bounds, or with fields its
// kind does not use, is a protocol error; so is a rendezvous on a stream.
func TestHeaderLimits(t *testing.T) {
	for _, h := range []Header{
		{Kind: Data, Length: 1001},
		{Kind: FailOp, Length: MaxReasonLen + 1},
		{Kind: Goodbye, Length: MaxReasonLen + 1},
		{Kind: Data, Length: 1, Iovs: 1},
		{Kind: Data, Length: 1, Slot: 1},
		{Kind: Goodbye, Gen: 1},
		{Kind: Rendezvous, Length: 0, Iovs: 1},
		{Kind: Rendezvous, Length: 1001, Iovs: 1},
		{Kind: Rendezvous, Length: 10, Iovs: 0},
		{Kind: 9},
	} {
		var b [RingHeaderSize]byte
		EncodeRingHeader(b[:], &h)
		if _, err := DecodeRingHeader(b[:], 1000); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("ring %+v: %v, want a protocol error", h, err)
		}
		if h.Slot != 0 || h.Gen != 0 {
			continue // not on a stream
		}
		EncodeHeader(b[:], &h)
		if _, err := DecodeHeader(b[:HeaderSize], 1000); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("stream %+v: %v, want a protocol error", h, err)
		}
	}
	var b [RingHeaderSize]byte
	EncodeRingHeader(b[:], &Header{Kind: Rendezvous, Length: 10, Iovs: 1})
	if _, err := DecodeHeader(b[:HeaderSize], 1000); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("a rendezvous on a stream: %v, want a protocol error", err)
	}
	if _, err := DecodeHeader(b[:HeaderSize-1], 1<<30); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("short header: %v, want a protocol error", err)
	}
	if _, err := DecodeRingHeader(b[:RingHeaderSize-1], 1<<30); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("short ring header: %v, want a protocol error", err)
	}
	for off, v := range map[int]byte{0: 'X', 4: Version + 1} {
		c := b
		c[off] = v
		if _, err := DecodeRingHeader(c[:], 1<<30); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("byte %d set to %d: %v, want a protocol error", off, v, err)
		}
	}
}

// checkDecoded fails t unless h, decoded from in, is within its kind's
// bounds and encodes back to in's bytes.
func checkDecoded(t *testing.T, h Header, in []byte, maxMessage uint64, ring bool) {
	t.Helper()
	switch h.Kind {
	case Data:
		if h.Length > maxMessage || h.Iovs != 0 {
			t.Fatalf("accepted %+v", h)
		}
	case FailOp, Goodbye:
		if h.Length > MaxReasonLen || h.Iovs != 0 {
			t.Fatalf("accepted %+v", h)
		}
	case Rendezvous:
		if !ring || h.Length == 0 || h.Length > maxMessage || h.Iovs == 0 {
			t.Fatalf("accepted %+v", h)
		}
	default:
		t.Fatalf("accepted frame kind %d", h.Kind)
	}
	if h.Kind != Rendezvous && (h.Slot != 0 || h.Gen != 0) {
		t.Fatalf("accepted %+v", h)
	}
	size := HeaderSize
	again := make([]byte, RingHeaderSize)
	if ring {
		size = RingHeaderSize
		EncodeRingHeader(again, &h)
	} else {
		EncodeHeader(again, &h)
	}
	if !bytes.Equal(again[:size], in[:size]) {
		t.Fatalf("re-encoding %+v gives %x, input %x", h, again[:size], in[:size])
	}
}

// FuzzDecodeHeader: any input either decodes to a header within the
// limits that encodes back to the same bytes, or is a protocol error; on
// a stream and in a ring.
func FuzzDecodeHeader(f *testing.F) {
	const maxMessage = 1 << 20
	for _, h := range []Header{
		{Kind: Data, Tag: transport.Tag{Comm: 1, Seq: 2, Step: 3}, Desc: testDesc, Length: 100},
		{Kind: FailOp, Length: 10},
		{Kind: Goodbye},
		{Kind: Rendezvous, Length: 5000, Iovs: 2, Slot: 3, Gen: 9},
	} {
		var b [RingHeaderSize]byte
		EncodeRingHeader(b[:], &h)
		f.Add(b[:])
	}
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, ring := range []bool{false, true} {
			decode := DecodeHeader
			if ring {
				decode = DecodeRingHeader
			}
			h, err := decode(in, maxMessage)
			if err != nil {
				if !errors.Is(err, transport.ErrProtocol) {
					t.Fatalf("error %v is not a protocol error", err)
				}
				continue
			}
			checkDecoded(t, h, in, maxMessage, ring)
		}
	})
}

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{Flags: 1, Rank: 3, Size: 8}
	var b [HelloSize]byte
	EncodeHello(b[:], h)
	if got, err := DecodeHello(b[:], 1); err != nil || got != h {
		t.Fatalf("DecodeHello(EncodeHello(%+v)) = %+v, %v", h, got, err)
	}
	if _, err := DecodeHello(b[:], 0); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("a flag the transport does not define: %v, want a protocol error", err)
	}
	for off, v := range map[int]byte{0: 'X', 4: Version + 1, 6: 1, 7: 1} {
		c := b
		c[off] = v
		if _, err := DecodeHello(c[:], 1); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("byte %d set to %d: %v, want a protocol error", off, v, err)
		}
	}
	if _, err := DecodeHello(b[:HelloSize-1], 1); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("short hello: %v, want a protocol error", err)
	}
}

// FuzzDecodeHello: any bytes either fail with a protocol error or decode
// to a hello, with no flag but those allowed, that encodes back to them.
func FuzzDecodeHello(f *testing.F) {
	var b [HelloSize]byte
	EncodeHello(b[:], Hello{Flags: 1, Rank: 3, Size: 8})
	f.Add(b[:], uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, flags uint8) {
		h, err := DecodeHello(in, flags)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if h.Flags&^flags != 0 {
			t.Fatalf("accepted flags %#x, allowed %#x", h.Flags, flags)
		}
		var again [HelloSize]byte
		EncodeHello(again[:], h)
		if !bytes.Equal(again[:], in[:HelloSize]) {
			t.Fatalf("%+v encodes to %x, input %x", h, again, in[:HelloSize])
		}
	})
}

func TestLimits(t *testing.T) {
	got, err := Limits{}.WithDefaults()
	if err != nil || got != (Limits{DefaultUnexpectedLimit, DefaultMaxMessage}) {
		t.Errorf("zero Limits with defaults = %+v, %v", got, err)
	}
	set := Limits{UnexpectedLimit: 5, MaxMessage: 7}
	if got, err := set.WithDefaults(); err != nil || got != set {
		t.Errorf("%+v with defaults = %+v, %v", set, got, err)
	}
	for _, l := range []Limits{{UnexpectedLimit: -1}, {MaxMessage: -1}} {
		if _, err := l.WithDefaults(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}

// TestSticky: the first error stays, Failed closes with it (the same
// channel before and after), and of racing Sets exactly one wins.
func TestSticky(t *testing.T) {
	var s Sticky
	failed := s.Failed()
	if s.Err() != nil {
		t.Fatalf("Err = %v before Set", s.Err())
	}
	select {
	case <-failed:
		t.Fatal("Failed closed before Set")
	default:
	}
	errs := make([]error, 8)
	won := make([]bool, len(errs))
	var wg sync.WaitGroup
	for i := range errs {
		errs[i] = errors.New("failure")
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i] = s.Set(errs[i])
		}()
	}
	wg.Wait()
	n := 0
	for i, w := range won {
		if w {
			n++
			if s.Err() != errs[i] {
				t.Errorf("Err = %v, want the winner's error", s.Err())
			}
		}
	}
	if n != 1 {
		t.Errorf("%d Sets won, want 1", n)
	}
	if s.Failed() != failed {
		t.Error("Failed returned another channel after Set")
	}
	select {
	case <-failed:
	default:
		t.Fatal("Failed is open after Set")
	}
	var late Sticky
	late.Set(errors.New("first"))
	select {
	case <-late.Failed():
	default:
		t.Fatal("Failed asked for after Set is open")
	}
}
