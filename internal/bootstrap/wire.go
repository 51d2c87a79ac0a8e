package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The store protocol, after the claim (launch.go) and Authenticate: length-prefixed binary frames in
// both directions,
//
//	op    uint8
//	id    uint32  request id chosen by the client, echoed in the reply
//	klen  uint16  key length, at most MaxKeyLen
//	vlen  uint32  value length, at most MaxValueLen
//	key   [klen]byte
//	value [vlen]byte
//
// all integers big-endian. The client first sends opHello (value: protocol
// version, rank, size) and waits for opOK or opErr. Requests carry ids so
// that several goroutines can share one connection and a Get that waits on
// the server does not hold up the others.

// Limits of the store protocol.
const (
	MaxKeyLen   = 1 << 10 // bytes
	MaxValueLen = 16 << 20
)

const (
	frameHeaderLen  = 11
	protocolVersion = 5
	helloLen        = 2 + 4 + 4 + 8
)

// Operations. Requests go from client to server, replies the other way.
const (
	opHello  byte = 1 // value: version uint16, rank uint32, size uint32, process uint64
	opSet    byte = 2 // key, value
	opGet    byte = 3 // key; reply waits until the key is set
	opCancel byte = 4 // id: the Get to forget; no reply
	opBye    byte = 5 // the client is done with the store
	opStatus byte = 6 // reply: value, the ranks never connected (uint32 each)
	// opProgress replaces the rank's progress record (value); no reply.
	opProgress byte = 7
	// opProgressQuery: reply value, every rank's record (progress.go).
	opProgressQuery byte = 8
	// opAbort: value, why this rank's Init failed (encodeFault); the
	// store fails the launch with it (launch.go).
	opAbort byte = 9
	// opReady: this rank's transport is up; its store connection ending
	// from now on does not fail the launch. Reply: opOK once every rank
	// is ready.
	opReady byte = 10
	// opPeerLost: value, the rank (uint32) whose connection this rank's
	// Init lost, then the error; the store fails the launch naming that
	// rank if its store connection ends too (launch.go). Reply: opOK, or
	// opFault with the launch's cause.
	opPeerLost byte = 11

	opOK    byte = 0x81
	opValue byte = 0x82 // value
	opErr   byte = 0x83 // value: error message
	opFault byte = 0x84 // id 0; value: why the launch failed (encodeFault, launch.go)
)

// errMalformed marks a frame that breaks the protocol; the connection that
// sent it is closed.
var errMalformed = errors.New("malformed store frame")

type frame struct {
	op    byte
	id    uint32
	key   string
	value []byte
}

func knownOp(op byte) bool {
	switch op {
	case opHello, opSet, opGet, opCancel, opBye, opStatus, opProgress, opProgressQuery, opAbort, opReady, opPeerLost, opOK, opValue, opErr, opFault:
		return true
	}
	return false
}

func opName(op byte) string {
	switch op {
	case opHello:
		return "hello"
	case opSet:
		return "set"
	case opGet:
		return "get"
	case opCancel:
		return "cancel"
	case opBye:
		return "bye"
	case opOK:
		return "ok"
	case opValue:
		return "value"
	case opErr:
		return "error"
	case opStatus:
		return "status"
	case opProgress:
		return "progress"
	case opProgressQuery:
		return "progress query"
	case opAbort:
		return "abort"
	case opReady:
		return "ready"
	case opPeerLost:
		return "peer lost"
	case opFault:
		return "fault"
	}
	return fmt.Sprintf("op(0x%02x)", op)
}

// writeFrame writes f to w; the caller flushes.
func writeFrame(w *bufio.Writer, f frame) error {
	if len(f.key) > MaxKeyLen || len(f.value) > MaxValueLen {
		return fmt.Errorf("store frame too large: key %d bytes (max %d), value %d bytes (max %d)",
			len(f.key), MaxKeyLen, len(f.value), MaxValueLen)
	}
	var h [frameHeaderLen]byte
	h[0] = f.op
	binary.BigEndian.PutUint32(h[1:], f.id)
	binary.BigEndian.PutUint16(h[5:], uint16(len(f.key)))
	binary.BigEndian.PutUint32(h[7:], uint32(len(f.value)))
	w.Write(h[:])
	w.WriteString(f.key)
	_, err := w.Write(f.value)
	return err
}

// readFrame reads one frame. It checks the operation and the limits before
// allocating, so no frame costs more than the limits allow (and frames are
// only read from authenticated peers). A clean end of stream
// before the first byte gives io.EOF; anything else malformed wraps
// errMalformed or is the read error.
func readFrame(r io.Reader) (frame, error) {
	var h [frameHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{op: h[0], id: binary.BigEndian.Uint32(h[1:])}
	klen := int(binary.BigEndian.Uint16(h[5:]))
	vlen := int(binary.BigEndian.Uint32(h[7:]))
	if !knownOp(f.op) {
		return frame{}, fmt.Errorf("%w: unknown operation 0x%02x", errMalformed, f.op)
	}
	if klen > MaxKeyLen {
		return frame{}, fmt.Errorf("%w: key length %d exceeds %d", errMalformed, klen, MaxKeyLen)
	}
	if vlen > MaxValueLen {
		return frame{}, fmt.Errorf("%w: value length %d exceeds %d", errMalformed, vlen, MaxValueLen)
	}
	body, err := readBody(r, klen+vlen)
	if err != nil {
		return frame{}, fmt.Errorf("%w: truncated %s frame: %v", errMalformed, opName(f.op), noEOF(err))
	}
	f.key = string(body[:klen])
	if vlen > 0 {
		f.value = body[klen:]
	}
	return f, nil
}

// readBody reads n bytes. A large body is only allocated in full once its
// first 64 KiB have arrived, so a frame header that announces 16 MiB and
// then stops costs little.
func readBody(r io.Reader, n int) ([]byte, error) {
	first := min(n, 64<<10)
	b := make([]byte, first)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if n == first {
		return b, nil
	}
	full := make([]byte, n)
	copy(full, b)
	if _, err := io.ReadFull(r, full[first:]); err != nil {
		return nil, noEOF(err)
	}
	return full, nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// hello opens a store connection. process is random per process: a
// connection from the same rank and process replaces the old one (the
// client reconnecting), from another process it is a duplicate rank.
type hello struct {
	version    uint16
	rank, size uint32
	process    uint64
}

func encodeHello(h hello) []byte {
	b := make([]byte, helloLen)
	binary.BigEndian.PutUint16(b, h.version)
	binary.BigEndian.PutUint32(b[2:], h.rank)
	binary.BigEndian.PutUint32(b[6:], h.size)
	binary.BigEndian.PutUint64(b[10:], h.process)
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloLen {
		return hello{}, fmt.Errorf("%w: hello of %d bytes, want %d", errMalformed, len(b), helloLen)
	}
	return hello{
		version: binary.BigEndian.Uint16(b),
		rank:    binary.BigEndian.Uint32(b[2:]),
		size:    binary.BigEndian.Uint32(b[6:]),
		process: binary.BigEndian.Uint64(b[10:]),
	}, nil
}
