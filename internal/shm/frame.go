package shm

import (
	"encoding/binary"

	"github.com/sparcml/sparcml/internal/wire"
)

// The rings carry frames: a fixed header of wire.RingHeaderSize (64)
// bytes, a body, and padding up to the next multiple of 64 bytes, so that
// every header starts on a cache line and never wraps around the end of
// the ring. The header is internal/wire's, TCP's with the rendezvous slot
// and generation after it.
//
// The body of a data frame is the payload, of any size: a frame larger
// than the ring streams through it, the reader copying out what the writer
// has put in. A rendezvous frame's body is the list of the sender's
// buffers, (address, length) pairs of 8 bytes each, from which the
// receiver copies the payload itself (process_vm_readv). A fail-op
// frame's body is its failure (transport.AppendFailure), a goodbye
// frame's the reason text.
const (
	hdrSize = wire.RingHeaderSize
	maxIovs = 64 // sender's buffers of one rendezvous; more go as data
	iovSize = 16
)

// bodySize is how many bytes follow h.
func bodySize(h *wire.Header) uint64 {
	if h.Kind == wire.Rendezvous {
		return uint64(h.Iovs) * iovSize
	}
	return h.Length
}

// padded rounds n up to the frame alignment.
func padded(n uint64) uint64 { return (n + hdrSize - 1) &^ (hdrSize - 1) }

// decodeHeader parses and checks a frame header (wire.DecodeRingHeader):
// maxMessage bounds a message's payload, slots the rendezvous slot
// numbers. Every error matches transport.ErrProtocol.
func decodeHeader(b []byte, maxMessage int64, slots int) (wire.Header, error) {
	h, err := wire.DecodeRingHeader(b, maxMessage)
	if err != nil || h.Kind != wire.Rendezvous {
		return h, err
	}
	if h.Iovs > maxIovs {
		return h, wire.ProtocolErrorf("rendezvous with %d buffers (limit %d)", h.Iovs, maxIovs)
	}
	if h.Slot >= uint32(slots) || h.Gen >= 1<<genBits {
		return h, wire.ProtocolErrorf("rendezvous slot %d generation %d out of range", h.Slot, h.Gen)
	}
	return h, nil
}

// remoteBuf is one of a rendezvous sender's buffers, in its address space.
type remoteBuf struct {
	addr, len uint64
}

// encodeIovs writes bufs' (address, length) pairs into b; addr gives a
// buffer's address.
func encodeIovs(b []byte, bufs []remoteBuf) {
	for i, rb := range bufs {
		binary.LittleEndian.PutUint64(b[i*iovSize:], rb.addr)
		binary.LittleEndian.PutUint64(b[i*iovSize+8:], rb.len)
	}
}

// decodeIovs parses a rendezvous body of h.Iovs buffers and checks that
// they are not empty and add up to the message's size.
func decodeIovs(b []byte, h *wire.Header) ([]remoteBuf, error) {
	if uint64(len(b)) < bodySize(h) {
		return nil, wire.ProtocolErrorf("short rendezvous body (%d of %d bytes)", len(b), bodySize(h))
	}
	bufs := make([]remoteBuf, h.Iovs)
	var sum uint64
	for i := range bufs {
		rb := remoteBuf{binary.LittleEndian.Uint64(b[i*iovSize:]), binary.LittleEndian.Uint64(b[i*iovSize+8:])}
		if rb.len == 0 || rb.len > h.Length || rb.addr+rb.len < rb.addr {
			return nil, wire.ProtocolErrorf("rendezvous buffer %d of %d bytes at %#x", i, rb.len, rb.addr)
		}
		sum += rb.len
		bufs[i] = rb
	}
	if sum != h.Length {
		return nil, wire.ProtocolErrorf("rendezvous buffers of %d bytes for a message of %d", sum, h.Length)
	}
	return bufs, nil
}
