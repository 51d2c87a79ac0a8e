package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// The rings carry frames: a fixed 64-byte little-endian header, a body, and
// padding up to the next multiple of 64 bytes, so that every header starts
// on a cache line and never wraps around the end of the ring.
//
//	offset size field
//	     0    1 frame kind (data, rendezvous, fail-op, goodbye)
//	     1    1 protocol version
//	     2    2 magic "SH"
//	     4    4 communicator id
//	     8    4 step
//	    12    4 rendezvous: the sender's slot
//	    16    8 operation sequence number
//	    24   24 transport.Desc (transport.EncodeDesc)
//	    48    8 data, rendezvous: the message's payload size;
//	            fail-op: its failure's size; goodbye: the reason's size
//	    56    4 rendezvous: the slot's generation
//	    60    4 rendezvous: the number of the sender's buffers
//
// The body of a data frame is the payload, of any size: a frame larger
// than the ring streams through it, the reader copying out what the writer
// has put in. A rendezvous frame's body is the list of the sender's
// buffers, (address, length) pairs of 8 bytes each, from which the
// receiver copies the payload itself (process_vm_readv). A fail-op
// frame's body is its failure (transport.AppendFailure), a goodbye
// frame's the reason text.
const (
	hdrSize      = 64
	frameVersion = 2
	frameMagic   = 0x4853 // "SH" in little-endian byte order

	maxReasonLen = transport.MaxFailureLen // of a fail-op or goodbye body
	maxIovs      = 64                      // sender's buffers of one rendezvous; more go as data
	iovSize      = 16
)

// frameKind says what a frame carries.
type frameKind uint8

const (
	frameData    frameKind = 1
	frameRndv    frameKind = 2
	frameFailOp  frameKind = 3
	frameGoodbye frameKind = 4
)

func (k frameKind) String() string {
	switch k {
	case frameData:
		return "data"
	case frameRndv:
		return "rendezvous"
	case frameFailOp:
		return "fail-op"
	case frameGoodbye:
		return "goodbye"
	}
	return fmt.Sprintf("frame-kind(%d)", uint8(k))
}

// header is a decoded frame header.
type header struct {
	kind   frameKind
	tag    transport.Tag
	desc   transport.Desc
	length uint64
	slot   uint32
	gen    uint32
	iovs   uint32
}

// bodySize is how many bytes follow the header.
func (h *header) bodySize() uint64 {
	if h.kind == frameRndv {
		return uint64(h.iovs) * iovSize
	}
	return h.length
}

// padded rounds n up to the frame alignment.
func padded(n uint64) uint64 { return (n + hdrSize - 1) &^ (hdrSize - 1) }

func encodeHeader(b []byte, h *header) {
	_ = b[hdrSize-1]
	b[0], b[1] = byte(h.kind), frameVersion
	binary.LittleEndian.PutUint16(b[2:], frameMagic)
	binary.LittleEndian.PutUint32(b[4:], h.tag.Comm)
	binary.LittleEndian.PutUint32(b[8:], h.tag.Step)
	binary.LittleEndian.PutUint32(b[12:], h.slot)
	binary.LittleEndian.PutUint64(b[16:], h.tag.Seq)
	transport.EncodeDesc(b[24:48], h.desc)
	binary.LittleEndian.PutUint64(b[48:], h.length)
	binary.LittleEndian.PutUint32(b[56:], h.gen)
	binary.LittleEndian.PutUint32(b[60:], h.iovs)
}

// protocolError is a malformed frame or hello; it matches
// transport.ErrProtocol with errors.Is.
type protocolError struct{ msg string }

func (e *protocolError) Error() string        { return e.msg }
func (e *protocolError) Is(target error) bool { return target == transport.ErrProtocol }

func protocolErrorf(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// decodeHeader parses and checks a frame header: maxMessage bounds a
// message's payload, slots the rendezvous slot numbers. Every error
// matches transport.ErrProtocol.
func decodeHeader(b []byte, maxMessage int64, slots int) (header, error) {
	var h header
	if len(b) < hdrSize {
		return h, protocolErrorf("short frame header (%d of %d bytes)", len(b), hdrSize)
	}
	if m := binary.LittleEndian.Uint16(b[2:]); m != frameMagic || b[1] != frameVersion {
		return h, protocolErrorf("bad frame header (magic %#04x version %d): the ring is out of sync", m, b[1])
	}
	h.kind = frameKind(b[0])
	h.tag.Comm = binary.LittleEndian.Uint32(b[4:])
	h.tag.Step = binary.LittleEndian.Uint32(b[8:])
	h.slot = binary.LittleEndian.Uint32(b[12:])
	h.tag.Seq = binary.LittleEndian.Uint64(b[16:])
	h.desc = transport.DecodeDesc(b[24:48])
	h.length = binary.LittleEndian.Uint64(b[48:])
	h.gen = binary.LittleEndian.Uint32(b[56:])
	h.iovs = binary.LittleEndian.Uint32(b[60:])
	switch h.kind {
	case frameData, frameFailOp, frameGoodbye:
		limit := uint64(maxReasonLen)
		if h.kind == frameData {
			limit = uint64(maxMessage)
		}
		if h.length > limit {
			return h, protocolErrorf("%v frame of %d bytes exceeds the limit of %d", h.kind, h.length, limit)
		}
		if h.slot != 0 || h.gen != 0 || h.iovs != 0 {
			return h, protocolErrorf("%v frame with rendezvous fields set", h.kind)
		}
	case frameRndv:
		if h.length == 0 || h.length > uint64(maxMessage) {
			return h, protocolErrorf("rendezvous of %d bytes (limit %d)", h.length, maxMessage)
		}
		if h.iovs == 0 || h.iovs > maxIovs {
			return h, protocolErrorf("rendezvous with %d buffers (limit %d)", h.iovs, maxIovs)
		}
		if h.slot >= uint32(slots) || h.gen >= 1<<genBits {
			return h, protocolErrorf("rendezvous slot %d generation %d out of range", h.slot, h.gen)
		}
	default:
		return h, protocolErrorf("unknown frame kind %d", uint8(h.kind))
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

// decodeIovs parses a rendezvous body of h.iovs buffers and checks that
// they are not empty and add up to the message's size.
func decodeIovs(b []byte, h *header) ([]remoteBuf, error) {
	if uint64(len(b)) < h.bodySize() {
		return nil, protocolErrorf("short rendezvous body (%d of %d bytes)", len(b), h.bodySize())
	}
	bufs := make([]remoteBuf, h.iovs)
	var sum uint64
	for i := range bufs {
		rb := remoteBuf{binary.LittleEndian.Uint64(b[i*iovSize:]), binary.LittleEndian.Uint64(b[i*iovSize+8:])}
		if rb.len == 0 || rb.len > h.length || rb.addr+rb.len < rb.addr {
			return nil, protocolErrorf("rendezvous buffer %d of %d bytes at %#x", i, rb.len, rb.addr)
		}
		sum += rb.len
		bufs[i] = rb
	}
	if sum != h.length {
		return nil, protocolErrorf("rendezvous buffers of %d bytes for a message of %d", sum, h.length)
	}
	return bufs, nil
}
