// Package verbs is a thin binding over libibverbs: devices, ports and GIDs,
// protection domains, memory regions, completion queues and channels, and
// reliable-connected queue pairs with batched, chained posting.
//
// It is the only cgo in the module. The cgo implementation is built on
// Linux with cgo unless the sparcml_noverbs tag is set; everywhere else a
// stub returns errors wrapping ErrUnavailable, so the module still builds
// where libibverbs-dev is missing (build with -tags sparcml_noverbs there).
//
// Handles (Context, PD, MR, CQ, CompChannel, QP) are small types whose
// Close is idempotent. They are safe for concurrent use where libibverbs
// is (posting to and polling from different goroutines); Close must not
// race with other calls on the same handle.
package verbs

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"
)

// ErrUnavailable is wrapped by every error that means RDMA cannot be used
// here at all: built without libibverbs, or no RDMA device present.
var ErrUnavailable = errors.New("RDMA not available")

var (
	errNotBuilt = fmt.Errorf("%w: built without libibverbs", ErrUnavailable)
	errNoDevice = fmt.Errorf("%w: no RDMA devices found", ErrUnavailable)
	// ErrClosed is returned by calls on a closed handle.
	ErrClosed = errors.New("verbs: handle closed")
)

// VerbError names the verb and object that failed and wraps the errno.
type VerbError struct {
	Verb   string // "ibv_modify_qp(RTR)"
	Object string // "rxe0 port 1", "qp 0x11"
	Err    error  // usually a syscall.Errno
}

func (e *VerbError) Error() string {
	if e.Object == "" {
		return e.Verb + ": " + e.Err.Error()
	}
	return e.Verb + " on " + e.Object + ": " + e.Err.Error()
}

// Unwrap returns the errno.
func (e *VerbError) Unwrap() error { return e.Err }

// LinkLayer of a port.
type LinkLayer uint8

// Link layers as reported by ibv_query_port.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand, LinkLayerUnspecified:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return fmt.Sprintf("linklayer(%d)", uint8(l))
}

// PortState of a port.
type PortState uint8

// Port states (enum ibv_port_state).
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	names := [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MTU is a path MTU enum value (1 = 256 bytes ... 5 = 4096 bytes).
type MTU uint8

// MTU values (enum ibv_mtu).
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string { return fmt.Sprint(m.Bytes()) }

// PortAttr is the part of ibv_port_attr the transport needs.
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	LID        uint16
	LinkLayer  LinkLayer
	GIDTblLen  int
	MaxMsgSize uint32
}

// DeviceAttr is the part of ibv_device_attr the transport needs.
type DeviceAttr struct {
	FWVer         string
	NodeGUID      uint64
	PhysPortCnt   int
	MaxQPWR       int
	MaxSGE        int
	MaxCQE        int
	MaxMRSize     uint64
	MaxQPRdAtom   int
	MaxQPInitRdAt int
}

// GID is a 16-byte port global identifier (an IPv6 address for RoCE).
type GID [16]byte

// IsZero reports an empty GID table entry.
func (g GID) IsZero() bool { return g == GID{} }

// IPv4Mapped reports whether the GID is an IPv4-mapped address
// (::ffff:a.b.c.d), as RoCEv2 GIDs of interfaces with IPv4 addresses are.
func (g GID) IPv4Mapped() bool {
	return net.IP(g[:]).To4() != nil && !g.IsZero()
}

func (g GID) String() string { return net.IP(g[:]).String() }

// GIDType says which protocol a GID table entry is for.
type GIDType uint8

// GID types (enum ibv_gid_type).
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCEv1"
	case GIDTypeRoCEv2:
		return "RoCEv2"
	}
	return fmt.Sprintf("gidtype(%d)", uint8(t))
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index   int
	GID     GID
	Type    GIDType
	IfIndex int // netdev behind the GID, 0 if none
}

// Access flags for memory regions and queue pairs (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite  Access = 1
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

// Opcode of a send work request (enum ibv_wr_opcode).
type Opcode uint8

// Send opcodes.
const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
)

// SGE is one scatter/gather element: a registered address range.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send work request. Several are posted as a chain in one
// call to ibv_post_send.
type SendWR struct {
	ID         uint64
	Opcode     Opcode
	SGEs       []SGE
	Imm        uint32 // host order; converted to network order on post
	RemoteAddr uint64 // RDMA operations
	RKey       uint32
	Signaled   bool
	Inline     bool
}

// RecvWR is one receive work request. A receive with no SGE accepts a
// zero-length send or the immediate of an RDMA write with immediate.
type RecvWR struct {
	ID   uint64
	SGEs []SGE
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint32

// Completion statuses the transport distinguishes; the rest print by
// number through String.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
)

// String uses libibverbs' ibv_wc_status_str where available.
func (s WCStatus) String() string { return wcStatusString(s) }

// WCOpcode is a work completion opcode (enum ibv_wc_opcode).
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WorkCompletion is the part of ibv_wc the transport uses.
type WorkCompletion struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32 // host order, valid when HasImm
	HasImm  bool
	QPNum   uint32
	Vendor  uint32
}

// QPState is a queue pair state (enum ibv_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPReset QPState = 0
	QPInit  QPState = 1
	QPRTR   QPState = 2
	QPRTS   QPState = 3
	QPSQD   QPState = 4
	QPSQE   QPState = 5
	QPError QPState = 6
)

func (s QPState) String() string {
	names := [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("qpstate(%d)", uint8(s))
}

// QPCaps sizes a queue pair.
type QPCaps struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
	MaxChain   int // longest chain PostSend/PostRecv accept (default 16)
}

// RTRAttr is what moving a QP to RTR needs to know about the remote side.
// For RoCE (Ethernet link layer) GRH must be set with the remote GID and
// the local GID index; for InfiniBand the remote LID is used.
type RTRAttr struct {
	RemoteQPN       uint32
	RemotePSN       uint32
	MTU             MTU
	DestLID         uint16
	GRH             bool
	DestGID         GID
	SGIDIndex       int
	HopLimit        uint8 // default 64
	TrafficClass    uint8
	SL              uint8
	MaxDestRdAtomic uint8 // default 1
	MinRNRTimer     uint8 // default 12 (0.64 ms)
}

// RTSAttr configures the send side of a QP.
type RTSAttr struct {
	PSN         uint32
	Timeout     uint8 // 4.096us * 2^Timeout; default 14 (67 ms)
	RetryCnt    uint8 // default 6 (rxe retries forever at 7)
	RNRRetry    uint8 // default 7 (infinite)
	MaxRdAtomic uint8 // default 1
}

// handle is the shared part of every handle: the C pointer, a name for
// errors, and an idempotent close.
type handle struct {
	mu   sync.Mutex
	ptr  unsafe.Pointer
	name string
}

// take returns the pointer and clears it, so a second Close is a no-op.
func (h *handle) take() unsafe.Pointer {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.ptr
	h.ptr = nil
	return p
}

func (h *handle) get() (unsafe.Pointer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return nil, fmt.Errorf("%s: %w", h.name, ErrClosed)
	}
	return h.ptr, nil
}

// Context is an open RDMA device.
type Context struct {
	handle
	dev string
}

// Name is the device name ("rxe0").
func (c *Context) Name() string { return c.dev }

// PD is a protection domain.
type PD struct {
	handle
	ctx *Context
}

// MR is a registered memory region.
type MR struct {
	handle
	addr uintptr
	len  int
	lkey uint32
	rkey uint32
}

// Addr is the start of the region.
func (m *MR) Addr() uint64 { return uint64(m.addr) }

// Len is the region's length in bytes.
func (m *MR) Len() int { return m.len }

// LKey is the local key, for SGEs.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key, for peers' RDMA operations.
func (m *MR) RKey() uint32 { return m.rkey }

// CompChannel is a completion channel: a file descriptor that becomes
// readable when a CQ armed with ReqNotify gets a completion.
type CompChannel struct {
	handle
	fd int
	pf *pollFile
}

// Fd is the channel's (non-blocking) file descriptor.
func (ch *CompChannel) Fd() int { return ch.fd }

// CQ is a completion queue. Poll copies completions out of a C array owned
// by the CQ, so it must be called from one goroutine at a time.
type CQ struct {
	handle
	ch    *CompChannel
	wcs   unsafe.Pointer // C array of struct ibv_wc
	nwc   int
	cqe   int
	unack int // events got from the channel not yet acknowledged
}

// Size is the number of entries the CQ was created with.
func (cq *CQ) Size() int { return cq.cqe }

// QP is a reliable-connected queue pair. Its chains are built in C memory
// owned by the QP, under a lock per direction.
type QP struct {
	handle
	pd        *PD
	num       uint32
	port      uint8
	caps      QPCaps
	sendMu    sync.Mutex
	recvMu    sync.Mutex
	sendArena unsafe.Pointer
	recvArena unsafe.Pointer
}

// Num is the queue pair number.
func (qp *QP) Num() uint32 { return qp.num }

// Caps are the capabilities the QP was created with (as granted).
func (qp *QP) Caps() QPCaps { return qp.caps }

// Devices lists the names of the RDMA devices libibverbs sees. It returns
// an error wrapping ErrUnavailable when there are none or when built
// without libibverbs.
func Devices() ([]string, error) { return devices() }

// Open opens the named device ("" opens the first one).
func Open(name string) (*Context, error) { return open(name) }

// Close closes the device. Every PD, CQ and QP of it must be closed first.
func (c *Context) Close() error { return c.close() }

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) { return c.queryDevice() }

// QueryPort returns a port's attributes (ports count from 1).
func (c *Context) QueryPort(port uint8) (PortAttr, error) { return c.queryPort(port) }

// QueryGID returns one entry of a port's GID table with its type. An
// empty slot gives a zero GID and no error.
func (c *Context) QueryGID(port uint8, index int) (GIDEntry, error) { return c.queryGID(port, index) }

// GIDTable returns the valid (non-empty) entries of a port's GID table
// with one ibv_query_gid_table call.
func (c *Context) GIDTable(port uint8) ([]GIDEntry, error) { return c.gidTable(port) }

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) { return c.allocPD() }

// NewCompChannel creates a completion channel with a non-blocking fd.
func (c *Context) NewCompChannel() (*CompChannel, error) { return c.newCompChannel() }

// NewCQ creates a completion queue of at least cqe entries, tied to ch
// (nil for none). Poll returns at most batch completions per call.
func (c *Context) NewCQ(cqe, batch int, ch *CompChannel) (*CQ, error) { return c.newCQ(cqe, batch, ch) }

// Close destroys the channel. Its CQs must be closed first.
func (ch *CompChannel) Close() error { return ch.close() }

// Close deallocates the PD. Its MRs and QPs must be closed first.
func (pd *PD) Close() error { return pd.close() }

// RegMR registers b. The memory must not move or be freed while
// registered: allocate it outside the Go heap (memreg.Alloc) or keep it
// alive and pinned (runtime.Pinner) until Close.
func (pd *PD) RegMR(b []byte, access Access) (*MR, error) { return pd.regMR(b, access) }

// CreateQP creates an RC queue pair on port whose sends and receives
// complete on sendCQ and recvCQ.
func (pd *PD) CreateQP(port uint8, sendCQ, recvCQ *CQ, caps QPCaps) (*QP, error) {
	return pd.createQP(port, sendCQ, recvCQ, caps)
}

// Close deregisters the region.
func (m *MR) Close() error { return m.close() }

// Poll copies up to len(wc) completions into wc (at most the CQ's batch)
// with one ibv_poll_cq call and returns how many.
func (cq *CQ) Poll(wc []WorkCompletion) (int, error) { return cq.poll(wc) }

// ReqNotify arms the CQ: the next completion makes its channel readable.
func (cq *CQ) ReqNotify(solicitedOnly bool) error { return cq.reqNotify(solicitedOnly) }

// GetEvent takes one event from the CQ's channel, if any (the fd is
// non-blocking; wait for it with poll(2) first). It reports whether an
// event was taken. Events are acknowledged in batches and on Close.
func (cq *CQ) GetEvent() (bool, error) { return cq.getEvent() }

// WaitEvent waits until the CQ's channel has an event and takes it, or
// until deadline (zero: no deadline), parked in Go's network poller rather
// than blocking a thread. It reports whether an event was taken; a
// deadline or Interrupt gives false and no error. Arm the CQ with
// ReqNotify and poll it once more before waiting, or a completion that
// came before arming is never signalled.
func (cq *CQ) WaitEvent(deadline time.Time) (bool, error) { return cq.waitEvent(deadline) }

// Interrupt wakes a WaitEvent in progress and makes later ones return at
// once, to shut a progress loop down. The channel stays open until Close.
func (ch *CompChannel) Interrupt() { ch.interrupt() }

// Close destroys the CQ. Its QPs must be closed first.
func (cq *CQ) Close() error { return cq.close() }

// ToInit moves the QP from RESET to INIT with the given remote access.
func (qp *QP) ToInit(access Access) error { return qp.toInit(access) }

// ToRTR moves the QP from INIT to RTR (ready to receive).
func (qp *QP) ToRTR(a RTRAttr) error { return qp.toRTR(a) }

// ToRTS moves the QP from RTR to RTS (ready to send).
func (qp *QP) ToRTS(a RTSAttr) error { return qp.toRTS(a) }

// ToError moves the QP to the error state: outstanding and later work
// requests complete with WCWRFlushErr and incoming packets are dropped.
func (qp *QP) ToError() error { return qp.toError() }

// State queries the QP's current state.
func (qp *QP) State() (QPState, error) { return qp.state() }

// PostSend posts wrs as one chain with one ibv_post_send call. On error,
// the index of the first request not posted is returned.
func (qp *QP) PostSend(wrs []SendWR) (int, error) { return qp.postSend(wrs) }

// PostRecv posts wrs as one chain with one ibv_post_recv call.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) { return qp.postRecv(wrs) }

// Close destroys the QP.
func (qp *QP) Close() error { return qp.close() }
