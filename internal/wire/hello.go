package wire

import "encoding/binary"

// After authentication each side of a connection sends a hello, so that
// each checks it talks to a rank of its job, with the same protocol:
//
//	offset size field
//	     0    4 magic "SPCH"
//	     4    1 protocol version
//	     5    1 flags, the transport's
//	     6    2 reserved, zero
//	     8    4 sender's rank
//	    12    4 job size
//
// The transport's own fields follow these HelloSize bytes (TCP: the
// connection's index and count; shared memory: the host's ranks and the
// rings' geometry).
const (
	HelloSize = 16

	helloMagic uint32 = 0x48435053 // "SPCH"
)

// Hello is the part of a hello every transport sends.
type Hello struct {
	Flags      uint8
	Rank, Size uint32
}

// EncodeHello writes h into b[:HelloSize].
func EncodeHello(b []byte, h Hello) {
	_ = b[HelloSize-1]
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	b[4], b[5], b[6], b[7] = Version, h.Flags, 0, 0
	binary.LittleEndian.PutUint32(b[8:], h.Rank)
	binary.LittleEndian.PutUint32(b[12:], h.Size)
}

// DecodeHello parses a hello and checks its magic, version and reserved
// bytes, and that it sets no flag but those of flags (the transport's);
// the caller checks the fields against what it expects. Every
// error matches transport.ErrProtocol.
func DecodeHello(b []byte, flags uint8) (Hello, error) {
	var h Hello
	if len(b) < HelloSize {
		return h, ProtocolErrorf("short hello (%d of %d bytes)", len(b), HelloSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != helloMagic {
		return h, ProtocolErrorf("bad hello magic %#08x", m)
	}
	if v := b[4]; v != Version {
		return h, ProtocolErrorf("peer speaks protocol version %d, this rank %d", v, Version)
	}
	if b[5]&^flags != 0 || b[6] != 0 || b[7] != 0 {
		return h, ProtocolErrorf("unknown hello flags %#x or reserved bytes set", b[5:8])
	}
	h.Flags = b[5]
	h.Rank = binary.LittleEndian.Uint32(b[8:])
	h.Size = binary.LittleEndian.Uint32(b[12:])
	return h, nil
}
