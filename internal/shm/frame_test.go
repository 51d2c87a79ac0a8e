package shm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []wire.Header{
		{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 1 << 40, Step: 3}, Desc: transport.Desc{Kind: transport.OpAllreduce, Count: 9, Param: 4}, Length: 1 << 30},
		{Kind: wire.Rendezvous, Tag: transport.Tag{Seq: 2}, Length: 100, Slot: rndvSlots - 1, Gen: 1<<genBits - 1, Iovs: maxIovs},
		{Kind: wire.FailOp, Tag: transport.Tag{Comm: 7, Seq: 8}, Length: wire.MaxReasonLen},
		{Kind: wire.Goodbye},
	} {
		var b [hdrSize]byte
		wire.EncodeRingHeader(b[:], &h)
		got, err := decodeHeader(b[:], 1<<34, rndvSlots)
		if err != nil || got != h {
			t.Errorf("decode(encode(%+v)) = %+v, %v", h, got, err)
		}
	}
}

// TestHeaderLimits: a header beyond its kind's bounds is a protocol error.
func TestHeaderLimits(t *testing.T) {
	for _, h := range []wire.Header{
		{Kind: wire.Data, Length: 1001},
		{Kind: wire.FailOp, Length: wire.MaxReasonLen + 1},
		{Kind: wire.Data, Length: 1, Slot: 1},
		{Kind: wire.Rendezvous, Length: 0, Iovs: 1},
		{Kind: wire.Rendezvous, Length: 10, Iovs: 0},
		{Kind: wire.Rendezvous, Length: 10, Iovs: maxIovs + 1},
		{Kind: wire.Rendezvous, Length: 10, Iovs: 1, Slot: rndvSlots},
		{Kind: 9},
	} {
		var b [hdrSize]byte
		wire.EncodeRingHeader(b[:], &h)
		if _, err := decodeHeader(b[:], 1000, rndvSlots); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("%+v: %v, want a protocol error", h, err)
		}
	}
}

// FuzzDecodeHeader: any bytes either fail with a protocol error or decode
// to a header within its kind's bounds that encodes back to them.
func FuzzDecodeHeader(f *testing.F) {
	var b [hdrSize]byte
	wire.EncodeRingHeader(b[:], &wire.Header{Kind: wire.Rendezvous, Length: 5000, Iovs: 2, Slot: 3, Gen: 9})
	f.Add(b[:])
	wire.EncodeRingHeader(b[:], &wire.Header{Kind: wire.Data, Length: 10})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHeader(in, 1<<20, rndvSlots)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if bodySize(&h) > 1<<20 || h.Kind == wire.Rendezvous && (h.Iovs == 0 || h.Slot >= rndvSlots) {
			t.Fatalf("accepted %+v", h)
		}
		var again [hdrSize]byte
		wire.EncodeRingHeader(again[:], &h)
		if !bytes.Equal(again[:], in[:hdrSize]) {
			t.Fatalf("%+v encodes to %x, input %x", h, again, in[:hdrSize])
		}
	})
}

// FuzzDecodeIovs: a rendezvous body is accepted only if its buffers are
// not empty, do not wrap around the address space and add up to the
// message.
func FuzzDecodeIovs(f *testing.F) {
	body := make([]byte, 2*iovSize)
	encodeIovs(body, []remoteBuf{{0x1000, 100}, {0x9000, 50}})
	f.Add(body, uint64(150), uint32(2))
	f.Fuzz(func(t *testing.T, body []byte, length uint64, iovs uint32) {
		if iovs > maxIovs {
			return
		}
		h := wire.Header{Kind: wire.Rendezvous, Length: length, Iovs: uint16(iovs)}
		bufs, err := decodeIovs(body, &h)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		var sum uint64
		for _, b := range bufs {
			if b.len == 0 || b.addr+b.len < b.addr {
				t.Fatalf("accepted buffer %+v", b)
			}
			sum += b.len
		}
		if sum != length || len(bufs) != int(iovs) {
			t.Fatalf("accepted %d buffers of %d bytes for %d of %d", len(bufs), sum, iovs, length)
		}
	})
}

// FuzzDecodeHello: any bytes either fail with a protocol error or decode
// to a hello that encodes back to them.
func FuzzDecodeHello(f *testing.F) {
	var b [helloSize]byte
	encodeHello(b[:], &hello{flags: flagNoSingleCopy, rank: 3, size: 8, peersHash: hashPeers([]int{2, 3}), ringSize: 1 << 20,
		slots: rndvSlots, inboxSize: 1 << 22, probeAddr: 0xc000010000})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHello(in)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		var again [helloSize]byte
		encodeHello(again[:], &h)
		if !bytes.Equal(again[:], in[:helloSize]) {
			t.Fatalf("%+v encodes to %x, input %x", h, again, in[:helloSize])
		}
		if _, err := decodeVerdict(in); err != nil && !errors.Is(err, transport.ErrProtocol) {
			t.Fatal(err)
		}
	})
}
