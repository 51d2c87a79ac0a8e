//go:build linux

package shm

import (
	"context"
	"errors"
	"testing"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// fakeReader is a transport of rank 0 whose peer, rank 1, is a ring in
// ordinary memory, for driving the ring reader with arbitrary bytes.
func fakeReader(ring []byte) (*Transport, *peer) {
	cfg, _ := Config{Rank: 0, Size: 2, Token: testToken, Peers: []int{0}, UnexpectedLimit: 1 << 16, MaxMessage: 1 << 20}.withDefaults()
	t := &Transport{cfg: cfg, rank: 0, size: 2, m: transport.NewMatcher(0, cfg.UnexpectedLimit), peers: make([]*peer, 2),
		parked: map[mkey]*rndvRecv{}, parkedOps: map[opKey][]mkey{}}
	mem := make([]byte, inboxSize(1, len(ring)))
	off := regionOffset(0, len(ring))
	copy(mem[off+pageSize:], ring)
	p := &peer{t: t, rank: 1, in: inRing{ringWords: ringAt(mem, off, len(ring))},
		mySlots: mem[off+offSlots : off+offSlots+4*rndvSlots], theirSlots: mem[off+offSlots : off+offSlots+4*rndvSlots],
		remoteSeq: word32(mem, offSeq), remoteAwake: word32(mem, offAwake), remoteClose: word32(mem, offClosed)}
	*word32(mem, offAwake) = 1 // no futex wake for a fake peer
	*p.in.head = uint64(len(ring))
	t.peers[1], t.local = p, []*peer{p}
	return t, p
}

// ringFrame is h with body, as a ring holds it.
func ringFrame(h wire.Header, body []byte) []byte {
	b := make([]byte, hdrSize+padded(uint64(len(body))))
	wire.EncodeRingHeader(b, &h)
	copy(b[hdrSize:], body)
	return b
}

// TestRingReaderFailure: a fail-op frame fails the receives of its
// operation with the failure it carries, code and origin; one whose
// failure does not decode is a protocol error.
func TestRingReaderFailure(t *testing.T) {
	read := func(body []byte) (*transport.Request, error) {
		in := ringFrame(wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Seq: 3}, Length: uint64(len(body))}, body)
		tr, p := fakeReader(append(in, make([]byte, minRingSize-len(in))...))
		*p.in.head = uint64(len(in))
		r := tr.m.Post(1, transport.Tag{Seq: 3}, transport.Desc{}, nil)
		var pulls []*pullJob
		_, err := tr.readRing(p, &pulls)
		return r, err
	}
	sent := &transport.RemoteFailure{Peer: 0, Code: transport.CodeTimeout, Reason: "late"}
	r, err := read(transport.AppendFailure(nil, sent))
	if err != nil {
		t.Fatal(err)
	}
	var got *transport.RemoteFailure
	if done, rerr := r.Test(); !done || !errors.As(rerr, &got) || *got != *sent || !errors.Is(rerr, context.DeadlineExceeded) {
		t.Fatalf("receive of the failed op: %v, want %+v", rerr, sent)
	}
	if _, err := read([]byte("no")); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("a malformed failure: %v, want ErrProtocol", err)
	}
}

// FuzzRingReader feeds arbitrary bytes to a ring's reader, with receives
// posted for a few tags: it must neither panic nor read beyond what was
// written, and it either reads frames or fails with a protocol error.
func FuzzRingReader(f *testing.F) {
	frame := func(h wire.Header, body []byte) []byte {
		b := make([]byte, hdrSize+padded(uint64(len(body))))
		wire.EncodeRingHeader(b, &h)
		copy(b[hdrSize:], body)
		return b
	}
	iov := make([]byte, iovSize)
	encodeIovs(iov, []remoteBuf{{0x1000, 500}})
	seed := append(frame(wire.Header{Kind: wire.Data, Tag: transport.Tag{Seq: 1}, Length: 5}, []byte("hello")),
		frame(wire.Header{Kind: wire.Rendezvous, Tag: transport.Tag{Seq: 2}, Length: 500, Iovs: 1, Slot: 2, Gen: 1}, iov)...)
	failure := transport.AppendFailure(nil, &transport.RemoteFailure{Peer: 1, Code: transport.CodeMismatch, Reason: "no"})
	seed = append(seed, frame(wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Seq: 3}, Length: uint64(len(failure))}, failure)...)
	seed = append(seed, frame(wire.Header{Kind: wire.Goodbye}, nil)...)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, in []byte) {
		size := minRingSize
		if len(in) > size {
			return
		}
		tr, p := fakeReader(append(in, make([]byte, size-len(in))...))
		*p.in.head = uint64(len(in))
		for seq := range uint64(4) {
			tr.m.Post(1, transport.Tag{Seq: seq}, transport.Desc{}, make([]byte, 16))
		}
		var pulls []*pullJob
		for range 3 {
			_, err := tr.readRing(p, &pulls)
			if err != nil {
				if !errors.Is(err, transport.ErrProtocol) {
					t.Fatalf("error %v is not a protocol error", err)
				}
				break
			}
		}
		if p.in.pos > uint64(len(in)) {
			t.Fatalf("read %d bytes of %d", p.in.pos, len(in))
		}
	})
}
