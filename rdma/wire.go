package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Wire format. Every eager message (data or control) is one RDMA write
// with immediate into a slot of the peer's receive ring: a fixed header
// followed by the payload. The immediate says what arrived:
//
//	bits 31..28  kind: immEager, immDone, immCredit
//	bits 27..0   eager: the ring slot; done: the receive id; credit: count
//
// Rendezvous completions (immDone) and credit returns (immCredit) use no
// ring slot: the former is the immediate of the last RDMA write of the
// payload into the receiver's buffer, the latter a zero-length send.
const (
	immEager  = 1
	immDone   = 2
	immCredit = 3

	immShift = 28
	immMask  = 1<<immShift - 1
)

func makeImm(kind, val uint32) uint32 { return kind<<immShift | val&immMask }

func splitImm(imm uint32) (kind, val uint32) { return imm >> immShift, imm & immMask }

// Header kinds.
const (
	kindData   = 1 // eager payload
	kindRTS    = 2 // rendezvous request to send: tag, desc, size, send id
	kindCTS    = 3 // clear to send: send id, receive id, address, rkey (or discard)
	kindFailOp = 4 // the sender failed operation (comm, seq); payload: failurePayload
	kindBye    = 5 // the sender is closing or aborting (Flags); reason in payload

	// Receiver-advertised rendezvous: a receive posted before its RTS
	// arrived offers its buffer at once, so the sender writes without
	// waiting for a CTS (one half round trip instead of three).
	kindAdv     = 6 // receive buffer on offer: tag, desc, address (Size), rkey, receive id (ID2), length (ID)
	kindNack    = 7 // sender to receiver: the advert for ID2 will not be used (size or desc differ)
	kindCancel  = 8 // receiver to sender: the message came eagerly, forget the advert ID2
	kindRevoke  = 9 // receiver to sender: the operation failed, give the advert ID2 back if unused
	kindRevoked = 10
	kindMax     = kindRevoked
)

var kindNames = [...]string{"?", "data", "rts", "cts", "failop", "bye", "adv", "nack", "cancel", "revoke", "revoked"}

const (
	wireVersion = 4
	hdrSize     = 72
)

// header is the fixed part of every eager message, hdrSize bytes,
// little-endian:
//
//	offset size field
//	     0    1 wire version
//	     1    1 kind
//	     2    2 credits
//	     4    4 payload length (Len)
//	     8    4 communicator id
//	    12    4 step
//	    16    8 operation sequence number
//	    24   24 transport.Desc (transport.EncodeDesc)
//	    48    8 Size
//	    56    4 ID
//	    60    4 ID2
//	    64    4 RKey
//	    68    4 Flags
type header struct {
	Kind    uint8
	Credits uint16 // ring slots the sender has freed since it last said so
	Len     uint32 // payload bytes in this slot
	Tag     transport.Tag
	Desc    transport.Desc
	Size    uint64 // RTS: message size; CTS: destination address
	ID      uint32 // RTS, CTS: send id
	ID2     uint32 // CTS: receive id
	RKey    uint32 // CTS
	Flags   uint32 // CTS: ctsDiscard; bye: byeAborted
}

// ctsDiscard: the receiver drops the message (its operation failed or the
// descriptors differ); the sender completes its send without writing.
const ctsDiscard = 1

// byeAborted: the goodbye of a rank that aborted, which its peers take
// for its death; without it the rank closed, and only what still
// involves it fails.
const byeAborted = 1

var le = binary.LittleEndian

func (h *header) encode(b []byte) {
	_ = b[hdrSize-1]
	b[0] = wireVersion
	b[1] = h.Kind
	le.PutUint16(b[2:], h.Credits)
	le.PutUint32(b[4:], h.Len)
	le.PutUint32(b[8:], h.Tag.Comm)
	le.PutUint32(b[12:], h.Tag.Step)
	le.PutUint64(b[16:], h.Tag.Seq)
	transport.EncodeDesc(b[24:48], h.Desc)
	le.PutUint64(b[48:], h.Size)
	le.PutUint32(b[56:], h.ID)
	le.PutUint32(b[60:], h.ID2)
	le.PutUint32(b[64:], h.RKey)
	le.PutUint32(b[68:], h.Flags)
}

func (h *header) decode(b []byte) error {
	if len(b) < hdrSize {
		return fmt.Errorf("%w: rdma header of %d bytes", transport.ErrProtocol, len(b))
	}
	if b[0] != wireVersion {
		return fmt.Errorf("%w: rdma wire version %d, want %d", transport.ErrProtocol, b[0], wireVersion)
	}
	h.Kind = b[1]
	if h.Kind < kindData || h.Kind > kindMax {
		return fmt.Errorf("%w: unknown rdma message kind %d", transport.ErrProtocol, h.Kind)
	}
	h.Credits = le.Uint16(b[2:])
	h.Len = le.Uint32(b[4:])
	h.Tag = transport.Tag{Comm: le.Uint32(b[8:]), Step: le.Uint32(b[12:]), Seq: le.Uint64(b[16:])}
	h.Desc = transport.DecodeDesc(b[24:48])
	h.Size = le.Uint64(b[48:])
	h.ID = le.Uint32(b[56:])
	h.ID2 = le.Uint32(b[60:])
	h.RKey = le.Uint32(b[64:])
	h.Flags = le.Uint32(b[68:])
	return nil
}

// connInfo is what a rank publishes for each peer through the bootstrap
// store: enough to bring its end of the RC connection to RTR and to write
// into its receive ring.
type connInfo struct {
	LinkLayer uint8
	MTU       uint8 // active MTU enum of the port
	LID       uint16
	QPN       uint32
	PSN       uint32
	GID       [16]byte
	RingAddr  uint64
	RingRKey  uint32
	Slots     uint32
	SlotSize  uint32
}

const connInfoSize = 4 + 1 + 1 + 2 + 4 + 4 + 16 + 8 + 4 + 4 + 4

// connMagic starts every connInfo so that a value from another transport
// or version is rejected with a clear error.
var connMagic = [4]byte{'S', 'R', 'D', wireVersion}

func (c *connInfo) encode() []byte {
	b := make([]byte, connInfoSize)
	copy(b, connMagic[:])
	b[4], b[5] = c.LinkLayer, c.MTU
	le.PutUint16(b[6:], c.LID)
	le.PutUint32(b[8:], c.QPN)
	le.PutUint32(b[12:], c.PSN)
	copy(b[16:32], c.GID[:])
	le.PutUint64(b[32:], c.RingAddr)
	le.PutUint32(b[40:], c.RingRKey)
	le.PutUint32(b[44:], c.Slots)
	le.PutUint32(b[48:], c.SlotSize)
	return b
}

func (c *connInfo) decode(b []byte) error {
	if len(b) != connInfoSize || [4]byte(b[:4]) != connMagic {
		return fmt.Errorf("%w: rdma connection data of %d bytes is not version %d (another sparcml version?)",
			transport.ErrProtocol, len(b), wireVersion)
	}
	c.LinkLayer, c.MTU = b[4], b[5]
	c.LID = le.Uint16(b[6:])
	c.QPN = le.Uint32(b[8:])
	c.PSN = le.Uint32(b[12:])
	copy(c.GID[:], b[16:32])
	c.RingAddr = le.Uint64(b[32:])
	c.RingRKey = le.Uint32(b[40:])
	c.Slots = le.Uint32(b[44:])
	c.SlotSize = le.Uint32(b[48:])
	return nil
}

// Work request ids: what completed, for which peer, and an id.
const (
	wrRecv      = 1
	wrEager     = 2
	wrRndv      = 3
	wrCredit    = 4
	wrKeepalive = 5
)

func makeWRID(kind uint8, peer int, id uint32) uint64 {
	return uint64(kind)<<56 | uint64(uint16(peer))<<40 | uint64(id)
}

func splitWRID(w uint64) (kind uint8, peer int, id uint32) {
	return uint8(w >> 56), int(uint16(w >> 40)), uint32(w)
}

// failurePayload is the payload of a failop message of rank failing with
// err: its code, origin and text (transport.AppendFailure), its text cut
// to fit an eager slot of eagerLimit bytes.
func failurePayload(rank int, err error, eagerLimit int) []byte {
	const codeAndOrigin = transport.MaxFailureLen - transport.MaxReasonLen
	b := transport.AppendFailure(nil, transport.FailureOf(rank, err))
	return b[:min(len(b), max(eagerLimit, codeAndOrigin))]
}
