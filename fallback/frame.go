package fallback

import (
	"encoding/binary"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Wire format. Every frame is a fixed 56-byte little-endian header followed
// by length payload bytes:
//
//	offset size field
//	     0    4 magic "SPCF"
//	     4    1 protocol version
//	     5    1 frame kind (data, fail-op, goodbye)
//	     6    2 reserved, zero
//	     8    4 communicator id
//	    12    4 step
//	    16    8 operation sequence number
//	    24   24 transport.Desc (transport.EncodeDesc)
//	    48    8 payload length
//
// A fixed header lets the reader learn a message's size before touching the
// payload, so the payload can be read straight into the posted receive
// buffer. The reserved field must be zero so that a future version can use
// it without being misread by this one.
const (
	frameMagic      uint32 = 0x46435053 // "SPCF" in little-endian byte order
	protocolVersion uint8  = 3
	headerSize             = 56

	// maxReasonLen bounds the payload of a fail-op frame (a failure,
	// transport.AppendFailure) and of a goodbye (its text).
	maxReasonLen = transport.MaxFailureLen
)

// frameKind says what a frame carries.
type frameKind uint8

const (
	frameData    frameKind = 1 // one message, payload = the message
	frameFailOp  frameKind = 2 // fail operation (comm, seq), payload = its failure (transport.AppendFailure)
	frameGoodbye frameKind = 3 // the sender is closing; payload = why, if it failed first (may be empty)
)

func (k frameKind) String() string {
	switch k {
	case frameData:
		return "data"
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
}

// encodeHeader writes h into b, which must hold headerSize bytes.
func encodeHeader(b []byte, h *header) {
	_ = b[headerSize-1]
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4] = protocolVersion
	b[5] = uint8(h.kind)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint32(b[8:], h.tag.Comm)
	binary.LittleEndian.PutUint32(b[12:], h.tag.Step)
	binary.LittleEndian.PutUint64(b[16:], h.tag.Seq)
	transport.EncodeDesc(b[24:48], h.desc)
	binary.LittleEndian.PutUint64(b[48:], h.length)
}

// protocolError is a malformed frame or hello. It matches
// transport.ErrProtocol with errors.Is; its text leaves the kind out, since
// the transport.PeerError carrying it already says "protocol error".
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

// Is makes errors.Is(err, transport.ErrProtocol) hold.
func (e *protocolError) Is(target error) bool { return target == transport.ErrProtocol }

func protocolErrorf(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// decodeHeader parses and checks a frame header. maxMessage is the largest
// data payload accepted; the other kinds have their own small bounds. Every
// error matches transport.ErrProtocol.
func decodeHeader(b []byte, maxMessage int64) (header, error) {
	var h header
	if len(b) < headerSize {
		return h, protocolErrorf("short frame header (%d of %d bytes)", len(b), headerSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != frameMagic {
		return h, protocolErrorf("bad frame magic %#08x (not a sparcml TCP stream, or out of sync)", m)
	}
	if v := b[4]; v != protocolVersion {
		return h, protocolErrorf("frame protocol version %d, this rank speaks %d", v, protocolVersion)
	}
	if r := binary.LittleEndian.Uint16(b[6:]); r != 0 {
		return h, protocolErrorf("reserved header field is %#04x, want 0", r)
	}
	h.kind = frameKind(b[5])
	h.tag.Comm = binary.LittleEndian.Uint32(b[8:])
	h.tag.Step = binary.LittleEndian.Uint32(b[12:])
	h.tag.Seq = binary.LittleEndian.Uint64(b[16:])
	h.desc = transport.DecodeDesc(b[24:48])
	h.length = binary.LittleEndian.Uint64(b[48:])

	var limit uint64
	switch h.kind {
	case frameData:
		limit = uint64(maxMessage)
	case frameFailOp:
		limit = maxReasonLen
	case frameGoodbye:
		limit = maxReasonLen
	default:
		return h, protocolErrorf("unknown frame kind %d", uint8(h.kind))
	}
	if h.length > limit {
		return h, protocolErrorf("%v frame of %d bytes exceeds the limit of %d", h.kind, h.length, limit)
	}
	return h, nil
}

// The hello follows authentication on every connection, in both
// directions, so each side checks it is talking to the rank, job size and
// connection slot it expects, with the same protocol:
//
//	offset size field
//	     0    4 magic "SPCH"
//	     4    1 protocol version
//	     5    3 reserved, zero
//	     8    4 sender's rank
//	    12    4 job size
//	    16    4 connection index
//	    20    4 connections per peer
const (
	helloMagic uint32 = 0x48435053 // "SPCH"
	helloSize         = 24
)

// hello is a decoded hello message.
type hello struct {
	rank, size, conn, connsPerPeer uint32
}

func encodeHello(b []byte, h hello) {
	_ = b[helloSize-1]
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	b[4] = protocolVersion
	b[5], b[6], b[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[8:], h.rank)
	binary.LittleEndian.PutUint32(b[12:], h.size)
	binary.LittleEndian.PutUint32(b[16:], h.conn)
	binary.LittleEndian.PutUint32(b[20:], h.connsPerPeer)
}

// decodeHello parses a hello and checks its magic and version; the caller
// checks the fields against what it expects.
func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloSize {
		return h, protocolErrorf("short hello (%d of %d bytes)", len(b), helloSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != helloMagic {
		return h, protocolErrorf("bad hello magic %#08x", m)
	}
	if v := b[4]; v != protocolVersion {
		return h, protocolErrorf("peer speaks protocol version %d, this rank %d", v, protocolVersion)
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return h, protocolErrorf("reserved hello bytes are not zero")
	}
	h.rank = binary.LittleEndian.Uint32(b[8:])
	h.size = binary.LittleEndian.Uint32(b[12:])
	h.conn = binary.LittleEndian.Uint32(b[16:])
	h.connsPerPeer = binary.LittleEndian.Uint32(b[20:])
	return h, nil
}
