//go:build linux && cgo && !sparcml_noverbs

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

// Several verbs are static inline functions or macros in verbs.h; these
// small wrappers give cgo real functions with plain arguments and flat
// structs, so each Go call is one cgo crossing.

struct sp_port {
	uint32_t state, max_mtu, active_mtu, lid, link_layer, gid_tbl_len, max_msg_sz;
};

static int sp_query_port(struct ibv_context *ctx, uint8_t port, struct sp_port *out) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int ret = ibv_query_port(ctx, port, &a);
	if (ret) return ret;
	out->state = a.state;
	out->max_mtu = a.max_mtu;
	out->active_mtu = a.active_mtu;
	out->lid = a.lid;
	out->link_layer = a.link_layer;
	out->gid_tbl_len = a.gid_tbl_len;
	out->max_msg_sz = a.max_msg_sz;
	return 0;
}

static int sp_query_gid(struct ibv_context *ctx, uint8_t port, int index,
		uint8_t *gid, uint32_t *type, uint32_t *ifindex) {
	struct ibv_gid_entry e;
	memset(&e, 0, sizeof e);
	int ret = ibv_query_gid_ex(ctx, port, index, &e, 0);
	if (ret == ENODATA || ret == -ENODATA) {
		// An empty slot of the table.
		memset(gid, 0, 16);
		*type = 0;
		*ifindex = 0;
		return 0;
	}
	if (ret) {
		// Older kernels: fall back to the GID alone.
		union ibv_gid g;
		int r2 = ibv_query_gid(ctx, port, index, &g);
		if (r2) return ret;
		memcpy(gid, g.raw, 16);
		*type = 0xff;
		*ifindex = 0;
		return 0;
	}
	memcpy(gid, e.gid.raw, 16);
	*type = e.gid_type;
	*ifindex = e.ndev_ifindex;
	return 0;
}

// sp_gid_table returns every valid GID of every port in one call; the
// caller owns the array.
static ssize_t sp_gid_table(struct ibv_context *ctx, size_t max, struct ibv_gid_entry **out) {
	*out = calloc(max, sizeof(struct ibv_gid_entry));
	if (!*out) return -ENOMEM;
	ssize_t n = ibv_query_gid_table(ctx, *out, max, 0);
	if (n < 0) { free(*out); *out = NULL; }
	return n;
}

static struct ibv_mr *sp_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

struct sp_wc {
	uint64_t id;
	uint32_t status, opcode, vendor, byte_len, imm, qp_num, flags;
};

static int sp_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, struct sp_wc *out) {
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = ntohl(wc[i].imm_data);
		out[i].qp_num = wc[i].qp_num;
		out[i].flags = wc[i].wc_flags;
	}
	return got;
}

static int sp_req_notify(struct ibv_cq *cq, int solicited) {
	return ibv_req_notify_cq(cq, solicited);
}

static int sp_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	return ibv_get_cq_event(ch, &cq, &ctx);
}

static int sp_modify_init(struct ibv_qp *qp, uint8_t port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int sp_modify_rtr(struct ibv_qp *qp, uint8_t port, int mtu, uint32_t qpn, uint32_t psn,
		uint16_t dlid, int grh, uint8_t *dgid, int sgid_index, uint8_t hop_limit,
		uint8_t tclass, uint8_t sl, uint8_t max_dest_rd, uint8_t min_rnr) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = qpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = max_dest_rd;
	a.min_rnr_timer = min_rnr;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = sl;
	a.ah_attr.port_num = port;
	if (grh) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = hop_limit;
		a.ah_attr.grh.traffic_class = tclass;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int sp_modify_rts(struct ibv_qp *qp, uint32_t psn, uint8_t timeout, uint8_t retry,
		uint8_t rnr_retry, uint8_t max_rd) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = max_rd;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int sp_modify_err(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int sp_query_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	int ret = ibv_query_qp(qp, &a, IBV_QP_STATE, &i);
	*state = a.qp_state;
	return ret;
}

// Flat descriptions of work requests, filled by Go in C memory; the post
// functions turn them into a linked chain (also in C memory) and post it
// with one call.
struct sp_swr {
	uint64_t id, remote;
	uint32_t rkey, imm, opcode, flags, nsge, sge_off;
};

struct sp_rwr {
	uint64_t id;
	uint32_t nsge, sge_off;
};

static int sp_post_send(struct ibv_qp *qp, struct sp_swr *d, int n, struct ibv_sge *sges,
		struct ibv_send_wr *wrs, int *bad_index) {
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = d[i].id;
		w->sg_list = d[i].nsge ? &sges[d[i].sge_off] : NULL;
		w->num_sge = d[i].nsge;
		w->opcode = d[i].opcode;
		w->send_flags = d[i].flags;
		w->imm_data = htonl(d[i].imm);
		w->wr.rdma.remote_addr = d[i].remote;
		w->wr.rdma.rkey = d[i].rkey;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	int ret = ibv_post_send(qp, wrs, &bad);
	*bad_index = ret && bad ? (int)(bad - wrs) : (ret ? 0 : n);
	return ret;
}

static int sp_post_recv(struct ibv_qp *qp, struct sp_rwr *d, int n, struct ibv_sge *sges,
		struct ibv_recv_wr *wrs, int *bad_index) {
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = d[i].id;
		w->sg_list = d[i].nsge ? &sges[d[i].sge_off] : NULL;
		w->num_sge = d[i].nsge;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	struct ibv_recv_wr *bad = NULL;
	int ret = ibv_post_recv(qp, wrs, &bad);
	*bad_index = ret && bad ? (int)(bad - wrs) : (ret ? 0 : n);
	return ret;
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Built reports whether this binary was built with libibverbs.
const Built = true

// errnoOf turns a verbs return value into an error: libibverbs returns
// the errno itself from most verbs, -1 with errno set from a few.
func errnoOf(ret C.int, cerr error) error {
	switch {
	case ret > 0:
		return syscall.Errno(ret)
	case ret < 0 && cerr != nil:
		return cerr
	case ret < 0:
		return syscall.Errno(-ret)
	}
	return nil
}

func verr(verb, obj string, err error) error {
	if err == nil {
		err = syscall.EIO
	}
	return &VerbError{Verb: verb, Object: obj, Err: err}
}

func deviceList() ([]*C.struct_ibv_device, **C.struct_ibv_device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		// ENOSYS: no kernel support (no ib_uverbs); anything else is
		// reported as is but still means "no device here".
		if err == syscall.ENOSYS || err == nil {
			return nil, nil, errNoDevice
		}
		return nil, nil, fmt.Errorf("%w (ibv_get_device_list: %v)", errNoDevice, err)
	}
	if n == 0 {
		C.ibv_free_device_list(list)
		return nil, nil, errNoDevice
	}
	return unsafe.Slice(list, int(n)), list, nil
}

func devices() ([]string, error) {
	devs, list, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = C.GoString(C.ibv_get_device_name(d))
	}
	return names, nil
}

func open(name string) (*Context, error) {
	devs, list, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, d := range devs {
		n := C.GoString(C.ibv_get_device_name(d))
		names = append(names, n)
		if name != "" && n != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, verr("ibv_open_device", n, err)
		}
		return &Context{handle: handle{ptr: unsafe.Pointer(ctx), name: n}, dev: n}, nil
	}
	return nil, fmt.Errorf("RDMA device %q not found (have %v)", name, names)
}

func (c *Context) c() (*C.struct_ibv_context, error) {
	p, err := c.get()
	return (*C.struct_ibv_context)(p), err
}

func (c *Context) close() error {
	p := c.take()
	if p == nil {
		return nil
	}
	if ret, err := C.ibv_close_device((*C.struct_ibv_context)(p)); ret != 0 {
		return verr("ibv_close_device", c.dev, errnoOf(ret, err))
	}
	return nil
}

func (c *Context) queryDevice() (DeviceAttr, error) {
	ctx, err := c.c()
	if err != nil {
		return DeviceAttr{}, err
	}
	var a C.struct_ibv_device_attr
	if ret, cerr := C.ibv_query_device(ctx, &a); ret != 0 {
		return DeviceAttr{}, verr("ibv_query_device", c.dev, errnoOf(ret, cerr))
	}
	// node_guid is big endian in memory; present it in the usual order.
	guid := binary.BigEndian.Uint64((*[8]byte)(unsafe.Pointer(&a.node_guid))[:])
	return DeviceAttr{
		FWVer:         C.GoString(&a.fw_ver[0]),
		NodeGUID:      guid,
		PhysPortCnt:   int(a.phys_port_cnt),
		MaxQPWR:       int(a.max_qp_wr),
		MaxSGE:        int(a.max_sge),
		MaxCQE:        int(a.max_cqe),
		MaxMRSize:     uint64(a.max_mr_size),
		MaxQPRdAtom:   int(a.max_qp_rd_atom),
		MaxQPInitRdAt: int(a.max_qp_init_rd_atom),
	}, nil
}

func (c *Context) queryPort(port uint8) (PortAttr, error) {
	ctx, err := c.c()
	if err != nil {
		return PortAttr{}, err
	}
	var p C.struct_sp_port
	if ret, cerr := C.sp_query_port(ctx, C.uint8_t(port), &p); ret != 0 {
		return PortAttr{}, verr("ibv_query_port", fmt.Sprintf("%s port %d", c.dev, port), errnoOf(ret, cerr))
	}
	return PortAttr{
		State:      PortState(p.state),
		MaxMTU:     MTU(p.max_mtu),
		ActiveMTU:  MTU(p.active_mtu),
		LID:        uint16(p.lid),
		LinkLayer:  LinkLayer(p.link_layer),
		GIDTblLen:  int(p.gid_tbl_len),
		MaxMsgSize: uint32(p.max_msg_sz),
	}, nil
}

func (c *Context) queryGID(port uint8, index int) (GIDEntry, error) {
	ctx, err := c.c()
	if err != nil {
		return GIDEntry{}, err
	}
	var g GID
	var typ, ifindex C.uint32_t
	ret, cerr := C.sp_query_gid(ctx, C.uint8_t(port), C.int(index), (*C.uint8_t)(unsafe.Pointer(&g[0])), &typ, &ifindex)
	if ret != 0 {
		return GIDEntry{}, verr("ibv_query_gid_ex", fmt.Sprintf("%s port %d index %d", c.dev, port, index), errnoOf(ret, cerr))
	}
	e := GIDEntry{Index: index, GID: g, Type: GIDType(typ), IfIndex: int(ifindex)}
	if typ == 0xff {
		// Type unknown (old kernel): an IPv4-mapped GID can only be RoCEv2.
		e.Type = GIDTypeRoCEv1
		if g.IPv4Mapped() {
			e.Type = GIDTypeRoCEv2
		}
	}
	return e, nil
}

func (c *Context) gidTable(port uint8) ([]GIDEntry, error) {
	ctx, err := c.c()
	if err != nil {
		return nil, err
	}
	pa, err := c.queryPort(port)
	if err != nil {
		return nil, err
	}
	da, err := c.queryDevice()
	if err != nil {
		return nil, err
	}
	var arr *C.struct_ibv_gid_entry
	size := pa.GIDTblLen * max(da.PhysPortCnt, 1)
	n := C.sp_gid_table(ctx, C.size_t(size), &arr)
	if n < 0 {
		return nil, verr("ibv_query_gid_table", c.dev, syscall.Errno(-n))
	}
	defer C.free(unsafe.Pointer(arr))
	var out []GIDEntry
	for _, e := range unsafe.Slice(arr, int(n)) {
		if uint8(e.port_num) != port {
			continue
		}
		var g GID
		copy(g[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
		out = append(out, GIDEntry{Index: int(e.gid_index), GID: g, Type: GIDType(e.gid_type), IfIndex: int(e.ndev_ifindex)})
	}
	return out, nil
}

func (c *Context) allocPD() (*PD, error) {
	ctx, err := c.c()
	if err != nil {
		return nil, err
	}
	pd, cerr := C.ibv_alloc_pd(ctx)
	if pd == nil {
		return nil, verr("ibv_alloc_pd", c.dev, cerr)
	}
	return &PD{handle: handle{ptr: unsafe.Pointer(pd), name: c.dev + " pd"}, ctx: c}, nil
}

func (c *Context) newCompChannel() (*CompChannel, error) {
	ctx, err := c.c()
	if err != nil {
		return nil, err
	}
	ch, cerr := C.ibv_create_comp_channel(ctx)
	if ch == nil {
		return nil, verr("ibv_create_comp_channel", c.dev, cerr)
	}
	fd := int(ch.fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, verr("fcntl(O_NONBLOCK) on completion channel", c.dev, err)
	}
	pf, err := newPollFile(fd, c.dev+" completion channel")
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, verr("ibv_create_comp_channel", c.dev, err)
	}
	return &CompChannel{handle: handle{ptr: unsafe.Pointer(ch), name: c.dev + " channel"}, fd: fd, pf: pf}, nil
}

func (ch *CompChannel) close() error {
	p := ch.take()
	if p == nil {
		return nil
	}
	ch.Interrupt()
	if ret, err := C.ibv_destroy_comp_channel((*C.struct_ibv_comp_channel)(p)); ret != 0 {
		return verr("ibv_destroy_comp_channel", ch.name, errnoOf(ret, err))
	}
	return nil
}

func (c *Context) newCQ(cqe, batch int, ch *CompChannel) (*CQ, error) {
	ctx, err := c.c()
	if err != nil {
		return nil, err
	}
	if batch <= 0 {
		batch = 32
	}
	var chp *C.struct_ibv_comp_channel
	if ch != nil {
		p, err := ch.get()
		if err != nil {
			return nil, err
		}
		chp = (*C.struct_ibv_comp_channel)(p)
	}
	cq, cerr := C.ibv_create_cq(ctx, C.int(cqe), nil, chp, 0)
	if cq == nil {
		return nil, verr("ibv_create_cq", fmt.Sprintf("%s (%d entries)", c.dev, cqe), cerr)
	}
	size := C.size_t(batch) * (C.size_t(unsafe.Sizeof(C.struct_ibv_wc{})) + C.size_t(unsafe.Sizeof(C.struct_sp_wc{})))
	wcs := C.calloc(1, size)
	if wcs == nil {
		C.ibv_destroy_cq(cq)
		return nil, verr("calloc", "completion array", syscall.ENOMEM)
	}
	return &CQ{handle: handle{ptr: unsafe.Pointer(cq), name: c.dev + " cq"}, ch: ch,
		wcs: wcs, nwc: batch, cqe: int(cq.cqe)}, nil
}

func (cq *CQ) poll(out []WorkCompletion) (int, error) {
	p, err := cq.get()
	if err != nil {
		return 0, err
	}
	n := min(len(out), cq.nwc)
	if n == 0 {
		return 0, nil
	}
	raw := (*C.struct_ibv_wc)(cq.wcs)
	flat := (*C.struct_sp_wc)(unsafe.Add(cq.wcs, uintptr(cq.nwc)*unsafe.Sizeof(C.struct_ibv_wc{})))
	got := int(C.sp_poll_cq((*C.struct_ibv_cq)(p), C.int(n), raw, flat))
	if got < 0 {
		return 0, verr("ibv_poll_cq", cq.name, syscall.EIO)
	}
	for i, w := range unsafe.Slice(flat, got) {
		out[i] = WorkCompletion{
			ID:      uint64(w.id),
			Status:  WCStatus(w.status),
			Opcode:  WCOpcode(w.opcode),
			ByteLen: uint32(w.byte_len),
			Imm:     uint32(w.imm),
			HasImm:  w.flags&C.IBV_WC_WITH_IMM != 0,
			QPNum:   uint32(w.qp_num),
			Vendor:  uint32(w.vendor),
		}
	}
	return got, nil
}

func (cq *CQ) reqNotify(solicited bool) error {
	p, err := cq.get()
	if err != nil {
		return err
	}
	s := C.int(0)
	if solicited {
		s = 1
	}
	if ret := C.sp_req_notify((*C.struct_ibv_cq)(p), s); ret != 0 {
		return verr("ibv_req_notify_cq", cq.name, errnoOf(ret, nil))
	}
	return nil
}

// ackBatch is how many channel events are acknowledged at once:
// ibv_ack_cq_events takes a mutex, so it is worth amortising.
const ackBatch = 64

func (cq *CQ) getEvent() (bool, error) {
	p, err := cq.get()
	if err != nil {
		return false, err
	}
	if cq.ch == nil {
		return false, verr("ibv_get_cq_event", cq.name, syscall.EINVAL)
	}
	chp, err := cq.ch.get()
	if err != nil {
		return false, err
	}
	ret, cerr := C.sp_get_cq_event((*C.struct_ibv_comp_channel)(chp))
	if ret != 0 {
		if cerr == syscall.EAGAIN || cerr == syscall.EWOULDBLOCK {
			return false, nil
		}
		return false, verr("ibv_get_cq_event", cq.name, errnoOf(ret, cerr))
	}
	cq.unack++
	if cq.unack >= ackBatch {
		C.ibv_ack_cq_events((*C.struct_ibv_cq)(p), C.uint(cq.unack))
		cq.unack = 0
	}
	return true, nil
}

func (cq *CQ) close() error {
	p := cq.take()
	if p == nil {
		return nil
	}
	c := (*C.struct_ibv_cq)(p)
	if cq.unack > 0 {
		// ibv_destroy_cq waits for every event to be acknowledged.
		C.ibv_ack_cq_events(c, C.uint(cq.unack))
		cq.unack = 0
	}
	ret, err := C.ibv_destroy_cq(c)
	C.free(cq.wcs)
	cq.wcs = nil
	if ret != 0 {
		return verr("ibv_destroy_cq", cq.name, errnoOf(ret, err))
	}
	return nil
}

func (pd *PD) close() error {
	p := pd.take()
	if p == nil {
		return nil
	}
	if ret, err := C.ibv_dealloc_pd((*C.struct_ibv_pd)(p)); ret != 0 {
		return verr("ibv_dealloc_pd", pd.name, errnoOf(ret, err))
	}
	return nil
}

func (pd *PD) regMR(b []byte, access Access) (*MR, error) {
	p, err := pd.get()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, verr("ibv_reg_mr", pd.name, syscall.EINVAL)
	}
	addr := unsafe.Pointer(unsafe.SliceData(b))
	mr, cerr := C.sp_reg_mr((*C.struct_ibv_pd)(p), addr, C.size_t(len(b)), C.int(access))
	if mr == nil {
		return nil, verr("ibv_reg_mr", fmt.Sprintf("%s (%d bytes at %p)", pd.name, len(b), addr), cerr)
	}
	return &MR{handle: handle{ptr: unsafe.Pointer(mr), name: fmt.Sprintf("%s mr %#x", pd.ctx.dev, uint32(mr.lkey))},
		addr: uintptr(addr), len: len(b), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}, nil
}

func (m *MR) close() error {
	p := m.take()
	if p == nil {
		return nil
	}
	if ret, err := C.ibv_dereg_mr((*C.struct_ibv_mr)(p)); ret != 0 {
		return verr("ibv_dereg_mr", m.name, errnoOf(ret, err))
	}
	return nil
}

const defaultMaxChain = 16

func (pd *PD) createQP(port uint8, sendCQ, recvCQ *CQ, caps QPCaps) (*QP, error) {
	p, err := pd.get()
	if err != nil {
		return nil, err
	}
	scq, err := sendCQ.get()
	if err != nil {
		return nil, err
	}
	rcq, err := recvCQ.get()
	if err != nil {
		return nil, err
	}
	if caps.MaxChain <= 0 {
		caps.MaxChain = defaultMaxChain
	}
	caps.MaxSendSGE = max(caps.MaxSendSGE, 1)
	caps.MaxRecvSGE = max(caps.MaxRecvSGE, 1)
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = (*C.struct_ibv_cq)(scq)
	ia.recv_cq = (*C.struct_ibv_cq)(rcq)
	ia.qp_type = C.IBV_QPT_RC
	ia.cap.max_send_wr = C.uint32_t(caps.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(caps.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(caps.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(caps.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(caps.MaxInline)
	qp, cerr := C.ibv_create_qp((*C.struct_ibv_pd)(p), &ia)
	if qp == nil {
		return nil, verr("ibv_create_qp(RC)", fmt.Sprintf("%s (send %d recv %d sge %d inline %d)", pd.ctx.dev,
			caps.MaxSendWR, caps.MaxRecvWR, caps.MaxSendSGE, caps.MaxInline), cerr)
	}
	caps.MaxSendWR = int(ia.cap.max_send_wr)
	caps.MaxRecvWR = int(ia.cap.max_recv_wr)
	caps.MaxSendSGE = int(ia.cap.max_send_sge)
	caps.MaxRecvSGE = int(ia.cap.max_recv_sge)
	caps.MaxInline = int(ia.cap.max_inline_data)
	q := &QP{handle: handle{ptr: unsafe.Pointer(qp), name: fmt.Sprintf("%s qp %#x", pd.ctx.dev, uint32(qp.qp_num))},
		pd: pd, num: uint32(qp.qp_num), port: port, caps: caps}
	q.sendArena = C.calloc(1, C.size_t(sendArenaSize(caps)))
	q.recvArena = C.calloc(1, C.size_t(recvArenaSize(caps)))
	if q.sendArena == nil || q.recvArena == nil {
		q.close()
		return nil, verr("calloc", "work request arena", syscall.ENOMEM)
	}
	return q, nil
}

// Arena layouts: flat descriptions, then SGEs, then the C work requests.
func sendArenaSize(c QPCaps) uintptr {
	n := uintptr(c.MaxChain)
	return n*unsafe.Sizeof(C.struct_sp_swr{}) + n*uintptr(c.MaxSendSGE)*unsafe.Sizeof(C.struct_ibv_sge{}) +
		n*unsafe.Sizeof(C.struct_ibv_send_wr{})
}

func recvArenaSize(c QPCaps) uintptr {
	n := uintptr(c.MaxChain)
	return n*unsafe.Sizeof(C.struct_sp_rwr{}) + n*uintptr(c.MaxRecvSGE)*unsafe.Sizeof(C.struct_ibv_sge{}) +
		n*unsafe.Sizeof(C.struct_ibv_recv_wr{})
}

func (qp *QP) c() (*C.struct_ibv_qp, error) {
	p, err := qp.get()
	return (*C.struct_ibv_qp)(p), err
}

func (qp *QP) close() error {
	p := qp.take()
	if p == nil {
		return nil
	}
	qp.sendMu.Lock()
	qp.recvMu.Lock()
	defer qp.sendMu.Unlock()
	defer qp.recvMu.Unlock()
	ret, err := C.ibv_destroy_qp((*C.struct_ibv_qp)(p))
	C.free(qp.sendArena)
	C.free(qp.recvArena)
	qp.sendArena, qp.recvArena = nil, nil
	if ret != 0 {
		return verr("ibv_destroy_qp", qp.name, errnoOf(ret, err))
	}
	return nil
}

func (qp *QP) toInit(access Access) error {
	q, err := qp.c()
	if err != nil {
		return err
	}
	if ret, cerr := C.sp_modify_init(q, C.uint8_t(qp.port), C.int(access)); ret != 0 {
		return verr("ibv_modify_qp(INIT)", fmt.Sprintf("%s port %d", qp.name, qp.port), errnoOf(ret, cerr))
	}
	return nil
}

func (qp *QP) toRTR(a RTRAttr) error {
	q, err := qp.c()
	if err != nil {
		return err
	}
	if a.HopLimit == 0 {
		a.HopLimit = 64
	}
	if a.MaxDestRdAtomic == 0 {
		a.MaxDestRdAtomic = 1
	}
	if a.MinRNRTimer == 0 {
		a.MinRNRTimer = 12
	}
	grh := C.int(0)
	if a.GRH {
		grh = 1
	}
	dgid := a.DestGID
	ret, cerr := C.sp_modify_rtr(q, C.uint8_t(qp.port), C.int(a.MTU), C.uint32_t(a.RemoteQPN), C.uint32_t(a.RemotePSN),
		C.uint16_t(a.DestLID), grh, (*C.uint8_t)(unsafe.Pointer(&dgid[0])), C.int(a.SGIDIndex), C.uint8_t(a.HopLimit),
		C.uint8_t(a.TrafficClass), C.uint8_t(a.SL), C.uint8_t(a.MaxDestRdAtomic), C.uint8_t(a.MinRNRTimer))
	if ret != 0 {
		return verr("ibv_modify_qp(RTR)", fmt.Sprintf("%s port %d (remote qpn %#x, mtu %s, gid index %d, dgid %v, dlid %d)",
			qp.name, qp.port, a.RemoteQPN, a.MTU, a.SGIDIndex, a.DestGID, a.DestLID), errnoOf(ret, cerr))
	}
	return nil
}

func (qp *QP) toRTS(a RTSAttr) error {
	q, err := qp.c()
	if err != nil {
		return err
	}
	if a.Timeout == 0 {
		a.Timeout = 14
	}
	if a.RetryCnt == 0 {
		// Not 7: soft-RoCE (rxe) retries forever at 7, like RNR retry,
		// and a dead peer would never be noticed.
		a.RetryCnt = 6
	}
	if a.RNRRetry == 0 {
		a.RNRRetry = 7
	}
	if a.MaxRdAtomic == 0 {
		a.MaxRdAtomic = 1
	}
	ret, cerr := C.sp_modify_rts(q, C.uint32_t(a.PSN), C.uint8_t(a.Timeout), C.uint8_t(a.RetryCnt),
		C.uint8_t(a.RNRRetry), C.uint8_t(a.MaxRdAtomic))
	if ret != 0 {
		return verr("ibv_modify_qp(RTS)", qp.name, errnoOf(ret, cerr))
	}
	return nil
}

func (qp *QP) toError() error {
	q, err := qp.c()
	if err != nil {
		return err
	}
	if ret, cerr := C.sp_modify_err(q); ret != 0 {
		return verr("ibv_modify_qp(ERR)", qp.name, errnoOf(ret, cerr))
	}
	return nil
}

func (qp *QP) state() (QPState, error) {
	q, err := qp.c()
	if err != nil {
		return 0, err
	}
	var s C.int
	if ret, cerr := C.sp_query_state(q, &s); ret != 0 {
		return 0, verr("ibv_query_qp", qp.name, errnoOf(ret, cerr))
	}
	return QPState(s), nil
}

func (qp *QP) postSend(wrs []SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	qp.sendMu.Lock()
	defer qp.sendMu.Unlock()
	q, err := qp.c()
	if err != nil {
		return 0, err
	}
	if len(wrs) > qp.caps.MaxChain {
		return 0, verr("ibv_post_send", fmt.Sprintf("%s (chain of %d > %d)", qp.name, len(wrs), qp.caps.MaxChain), syscall.EINVAL)
	}
	n := qp.caps.MaxChain
	descs := unsafe.Slice((*C.struct_sp_swr)(qp.sendArena), n)
	sgeBase := unsafe.Add(qp.sendArena, uintptr(n)*unsafe.Sizeof(C.struct_sp_swr{}))
	sges := unsafe.Slice((*C.struct_ibv_sge)(sgeBase), n*qp.caps.MaxSendSGE)
	cwrs := unsafe.Add(sgeBase, uintptr(n*qp.caps.MaxSendSGE)*unsafe.Sizeof(C.struct_ibv_sge{}))
	off := 0
	for i, w := range wrs {
		if len(w.SGEs) > qp.caps.MaxSendSGE {
			return 0, verr("ibv_post_send", fmt.Sprintf("%s (%d SGEs > %d)", qp.name, len(w.SGEs), qp.caps.MaxSendSGE), syscall.EINVAL)
		}
		var flags C.uint32_t
		if w.Signaled {
			flags |= C.IBV_SEND_SIGNALED
		}
		if w.Inline {
			flags |= C.IBV_SEND_INLINE
		}
		descs[i] = C.struct_sp_swr{id: C.uint64_t(w.ID), remote: C.uint64_t(w.RemoteAddr), rkey: C.uint32_t(w.RKey),
			imm: C.uint32_t(w.Imm), opcode: C.uint32_t(w.Opcode), flags: flags,
			nsge: C.uint32_t(len(w.SGEs)), sge_off: C.uint32_t(off)}
		for _, s := range w.SGEs {
			sges[off] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			off++
		}
	}
	var bad C.int
	ret := C.sp_post_send(q, &descs[0], C.int(len(wrs)), &sges[0], (*C.struct_ibv_send_wr)(cwrs), &bad)
	if ret != 0 {
		return int(bad), verr("ibv_post_send", qp.name, errnoOf(ret, nil))
	}
	return len(wrs), nil
}

func (qp *QP) postRecv(wrs []RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	qp.recvMu.Lock()
	defer qp.recvMu.Unlock()
	q, err := qp.c()
	if err != nil {
		return 0, err
	}
	if len(wrs) > qp.caps.MaxChain {
		return 0, verr("ibv_post_recv", fmt.Sprintf("%s (chain of %d > %d)", qp.name, len(wrs), qp.caps.MaxChain), syscall.EINVAL)
	}
	n := qp.caps.MaxChain
	descs := unsafe.Slice((*C.struct_sp_rwr)(qp.recvArena), n)
	sgeBase := unsafe.Add(qp.recvArena, uintptr(n)*unsafe.Sizeof(C.struct_sp_rwr{}))
	sges := unsafe.Slice((*C.struct_ibv_sge)(sgeBase), n*qp.caps.MaxRecvSGE)
	cwrs := unsafe.Add(sgeBase, uintptr(n*qp.caps.MaxRecvSGE)*unsafe.Sizeof(C.struct_ibv_sge{}))
	off := 0
	for i, w := range wrs {
		if len(w.SGEs) > qp.caps.MaxRecvSGE {
			return 0, verr("ibv_post_recv", fmt.Sprintf("%s (%d SGEs > %d)", qp.name, len(w.SGEs), qp.caps.MaxRecvSGE), syscall.EINVAL)
		}
		descs[i] = C.struct_sp_rwr{id: C.uint64_t(w.ID), nsge: C.uint32_t(len(w.SGEs)), sge_off: C.uint32_t(off)}
		for _, s := range w.SGEs {
			sges[off] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			off++
		}
	}
	var bad C.int
	ret := C.sp_post_recv(q, &descs[0], C.int(len(wrs)), &sges[0], (*C.struct_ibv_recv_wr)(cwrs), &bad)
	if ret != 0 {
		return int(bad), verr("ibv_post_recv", qp.name, errnoOf(ret, nil))
	}
	return len(wrs), nil
}

func wcStatusString(s WCStatus) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}
