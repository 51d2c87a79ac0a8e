package shm

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/sparcml/sparcml/internal/wire"
)

// After authentication each side of a connection sends a hello, with its
// inbox's file descriptor attached (SCM_RIGHTS), so each checks it talks
// to the rank, job and ring geometry it expects: wire.Hello (rank, job
// size and the flags, 1 = the sender uses no single copy,
// Config.NoSingleCopy), then
//
//	offset size field
//	    16    8 hash of the host's ranks (Config.Peers)
//	    24    4 ring size
//	    28    4 rendezvous slots per peer
//	    32    8 inbox size
//	    40    8 address of the probe in the sender's memory
//	    48   32 the probe's bytes
//
// Each side then reads the other's probe with process_vm_readv and answers
// with a verdict (magic "SPSV", then 0 if it read the probe, else why
// not: an errno, or one of the verdict codes below), so each knows whether
// its large messages to the other may stay in its buffers to be read.
const (
	verdictMagic uint32 = 0x56535053 // "SPSV"
	helloSize           = wire.HelloSize + 64
	verdictSize         = 8
	probeSize           = 32

	flagNoSingleCopy = 1

	verdictOff        uint32 = 1<<32 - 1 // NoSingleCopy on either side
	verdictMismatch   uint32 = 1<<32 - 2 // read other bytes than the hello said
	verdictInvisible  uint32 = 1<<32 - 3 // the peer's pid is not in this pid namespace
	verdictBadAddress uint32 = 1<<32 - 4 // the probe address is not a possible one
)

type hello struct {
	flags     uint8
	rank      uint32
	size      uint32
	peersHash uint64
	ringSize  uint32
	slots     uint32
	inboxSize uint64
	probeAddr uint64
	probe     [probeSize]byte
}

func encodeHello(b []byte, h *hello) {
	_ = b[helloSize-1]
	wire.EncodeHello(b, wire.Hello{Flags: h.flags, Rank: h.rank, Size: h.size})
	binary.LittleEndian.PutUint64(b[16:], h.peersHash)
	binary.LittleEndian.PutUint32(b[24:], h.ringSize)
	binary.LittleEndian.PutUint32(b[28:], h.slots)
	binary.LittleEndian.PutUint64(b[32:], h.inboxSize)
	binary.LittleEndian.PutUint64(b[40:], h.probeAddr)
	copy(b[48:], h.probe[:])
}

// decodeHello parses a hello and checks its magic, version, flags and
// reserved bytes (wire.DecodeHello); the caller compares the fields with
// its own.
func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloSize {
		return h, wire.ProtocolErrorf("short hello (%d of %d bytes)", len(b), helloSize)
	}
	w, err := wire.DecodeHello(b, flagNoSingleCopy)
	if err != nil {
		return h, err
	}
	h.flags, h.rank, h.size = w.Flags, w.Rank, w.Size
	h.peersHash = binary.LittleEndian.Uint64(b[16:])
	h.ringSize = binary.LittleEndian.Uint32(b[24:])
	h.slots = binary.LittleEndian.Uint32(b[28:])
	h.inboxSize = binary.LittleEndian.Uint64(b[32:])
	h.probeAddr = binary.LittleEndian.Uint64(b[40:])
	copy(h.probe[:], b[48:helloSize])
	return h, nil
}

func encodeVerdict(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:], verdictMagic)
	binary.LittleEndian.PutUint32(b[4:], v)
}

func decodeVerdict(b []byte) (uint32, error) {
	if len(b) < verdictSize || binary.LittleEndian.Uint32(b[0:]) != verdictMagic {
		return 0, wire.ProtocolErrorf("bad single-copy verdict %x", b)
	}
	return binary.LittleEndian.Uint32(b[4:]), nil
}

// hashPeers identifies the list of ranks on the host, so that two ranks
// that disagree about it fail at set-up instead of writing into the wrong
// rings.
func hashPeers(peers []int) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, r := range peers {
		binary.LittleEndian.PutUint32(b[:], uint32(r))
		h.Write(b[:])
	}
	return h.Sum64()
}
