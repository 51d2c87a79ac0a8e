package fallback

import (
	"encoding/binary"

	"github.com/sparcml/sparcml/internal/wire"
)

// A TCP hello is the hello every transport sends (wire.Hello, no flags)
// followed by the connection slot, so that each side also checks it
// fills the slot it expects:
//
//	offset size field
//	    16    4 connection index
//	    20    4 connections per peer
const helloSize = wire.HelloSize + 8

// hello is a decoded TCP hello.
type hello struct {
	rank, size, conn, connsPerPeer uint32
}

func encodeHello(b []byte, h hello) {
	_ = b[helloSize-1]
	wire.EncodeHello(b, wire.Hello{Rank: h.rank, Size: h.size})
	binary.LittleEndian.PutUint32(b[16:], h.conn)
	binary.LittleEndian.PutUint32(b[20:], h.connsPerPeer)
}

// decodeHello parses a hello and checks its magic, version and reserved
// bytes; the caller checks the fields against what it expects.
func decodeHello(b []byte) (hello, error) {
	if len(b) < helloSize {
		return hello{}, wire.ProtocolErrorf("short hello (%d of %d bytes)", len(b), helloSize)
	}
	w, err := wire.DecodeHello(b, 0)
	if err != nil {
		return hello{}, err
	}
	return hello{rank: w.Rank, size: w.Size, conn: binary.LittleEndian.Uint32(b[16:]),
		connsPerPeer: binary.LittleEndian.Uint32(b[20:])}, nil
}
