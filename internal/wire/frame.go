package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Every frame starts with a fixed little-endian header and its body
// follows:
//
//	offset size field
//	     0    4 magic "SPCF"
//	     4    1 protocol version
//	     5    1 frame kind
//	     6    2 rendezvous: the number of the sender's buffers; else zero
//	     8    4 communicator id
//	    12    4 step
//	    16    8 operation sequence number
//	    24   24 transport.Desc (transport.EncodeDesc)
//	    48    8 data, rendezvous: the message's payload size;
//	            fail-op: its failure's size; goodbye: the reason's size
//
// On a stream (TCP) the header is these HeaderSize bytes. In a ring of
// shared memory it is RingHeaderSize bytes, one cache line, the
// rendezvous slot and generation following:
//
//	offset size field
//	    56    4 rendezvous: the sender's slot; else zero
//	    60    4 rendezvous: the slot's generation; else zero
//
// A fixed header lets the reader learn a message's size before touching
// the payload, so the payload can be read straight into the posted
// receive buffer. The fields a kind does not use must be zero, so that a
// future version can use them without being misread by this one.
const (
	HeaderSize     = 56
	RingHeaderSize = 64

	frameMagic uint32 = 0x46435053 // "SPCF" in little-endian byte order

	// MaxReasonLen bounds the body of a fail-op frame (its failure, code
	// and origin included: transport.AppendFailure) and of a goodbye
	// (its reason text).
	MaxReasonLen = transport.MaxFailureLen
)

// Kind says what a frame carries.
type Kind uint8

// The frame kinds.
const (
	// Data is one message; the body is the payload.
	Data Kind = 1
	// FailOp fails operation (comm, seq); the body is its failure
	// (transport.AppendFailure: code, origin rank and reason).
	FailOp Kind = 2
	// Goodbye says the sender is closing; the body is why, if it
	// failed first (may be empty).
	Goodbye Kind = 3
	// Rendezvous (shared memory only) offers a message for the receiver
	// to read from the sender's buffers, which the body lists.
	Rendezvous Kind = 4
)

func (k Kind) String() string {
	switch k {
	case Data:
		return "data"
	case FailOp:
		return "fail-op"
	case Goodbye:
		return "goodbye"
	case Rendezvous:
		return "rendezvous"
	}
	return fmt.Sprintf("frame-kind(%d)", uint8(k))
}

// Header is a decoded frame header.
type Header struct {
	Kind   Kind
	Tag    transport.Tag
	Desc   transport.Desc
	Length uint64
	// Iovs, Slot and Gen are a rendezvous frame's, zero in the others:
	// the number of the sender's buffers the body lists, and the slot
	// (with its generation) the receiver releases once it has read them.
	Iovs      uint16
	Slot, Gen uint32
}

// EncodeHeader writes h into b[:HeaderSize], the header of a frame on a
// stream; h's Slot and Gen must be zero.
func EncodeHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4] = Version
	b[5] = uint8(h.Kind)
	binary.LittleEndian.PutUint16(b[6:], h.Iovs)
	binary.LittleEndian.PutUint32(b[8:], h.Tag.Comm)
	binary.LittleEndian.PutUint32(b[12:], h.Tag.Step)
	binary.LittleEndian.PutUint64(b[16:], h.Tag.Seq)
	transport.EncodeDesc(b[24:48], h.Desc)
	binary.LittleEndian.PutUint64(b[48:], h.Length)
}

// EncodeRingHeader writes h into b[:RingHeaderSize], the header of a
// frame in a ring.
func EncodeRingHeader(b []byte, h *Header) {
	_ = b[RingHeaderSize-1]
	EncodeHeader(b, h)
	binary.LittleEndian.PutUint32(b[56:], h.Slot)
	binary.LittleEndian.PutUint32(b[60:], h.Gen)
}

// DecodeHeader parses and checks the header of a frame on a stream, which
// carries no rendezvous. maxMessage is the largest data payload accepted;
// the other kinds have their own small bounds. Every error matches
// transport.ErrProtocol.
func DecodeHeader(b []byte, maxMessage int64) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ProtocolErrorf("short frame header (%d of %d bytes)", len(b), HeaderSize)
	}
	h, err := decode(b, maxMessage)
	if err == nil && h.Kind == Rendezvous {
		err = ProtocolErrorf("%v frame on a stream", h.Kind)
	}
	return h, err
}

// DecodeRingHeader parses and checks the header of a frame in a ring:
// maxMessage bounds a message's payload. The caller checks a rendezvous
// frame's buffers, slot and generation against its own bounds. Every
// error matches transport.ErrProtocol.
func DecodeRingHeader(b []byte, maxMessage int64) (Header, error) {
	if len(b) < RingHeaderSize {
		return Header{}, ProtocolErrorf("short frame header (%d of %d bytes)", len(b), RingHeaderSize)
	}
	h, err := decode(b, maxMessage)
	if err != nil {
		return h, err
	}
	h.Slot = binary.LittleEndian.Uint32(b[56:])
	h.Gen = binary.LittleEndian.Uint32(b[60:])
	if h.Kind != Rendezvous && (h.Slot != 0 || h.Gen != 0) {
		return h, ProtocolErrorf("%v frame with rendezvous fields set", h.Kind)
	}
	return h, nil
}

// decode parses b[:HeaderSize] and checks it.
func decode(b []byte, maxMessage int64) (Header, error) {
	var h Header
	if m := binary.LittleEndian.Uint32(b[0:]); m != frameMagic {
		return h, ProtocolErrorf("bad frame magic %#08x (not a sparcml stream, or out of sync)", m)
	}
	if v := b[4]; v != Version {
		return h, ProtocolErrorf("frame protocol version %d, this rank speaks %d", v, Version)
	}
	h.Kind = Kind(b[5])
	h.Iovs = binary.LittleEndian.Uint16(b[6:])
	h.Tag.Comm = binary.LittleEndian.Uint32(b[8:])
	h.Tag.Step = binary.LittleEndian.Uint32(b[12:])
	h.Tag.Seq = binary.LittleEndian.Uint64(b[16:])
	h.Desc = transport.DecodeDesc(b[24:48])
	h.Length = binary.LittleEndian.Uint64(b[48:])

	var limit uint64
	switch h.Kind {
	case Data:
		limit = uint64(maxMessage)
	case FailOp, Goodbye:
		limit = MaxReasonLen
	case Rendezvous:
		if h.Length == 0 || h.Length > uint64(maxMessage) {
			return h, ProtocolErrorf("rendezvous of %d bytes (limit %d)", h.Length, maxMessage)
		}
		if h.Iovs == 0 {
			return h, ProtocolErrorf("rendezvous with no buffers")
		}
		return h, nil
	default:
		return h, ProtocolErrorf("unknown frame kind %d", uint8(h.Kind))
	}
	if h.Iovs != 0 {
		return h, ProtocolErrorf("reserved header field is %#04x, want 0", h.Iovs)
	}
	if h.Length > limit {
		return h, ProtocolErrorf("%v frame of %d bytes exceeds the limit of %d", h.Kind, h.Length, limit)
	}
	return h, nil
}
