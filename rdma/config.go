package rdma

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Mellanox/rdmamap"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/rdma/rdmainfo"
	"github.com/sparcml/sparcml/verbs"
)

// Config configures an RDMA transport.
type Config struct {
	Rank, Size int
	// Store exchanges connection data (QP numbers, GIDs, ring addresses).
	Store bootstrap.Store
	// Device is "rxe0" or "rxe0:1" (device and port), as SPARCML_IB_DEV
	// gives it to the public API; "" picks the device behind IfName, else the first active
	// port of any device.
	Device string
	// GIDIndex is the GID table index for RoCE; -1 picks one: the
	// RoCEv2 GID with an IPv4-mapped address, else any RoCEv2 GID, else
	// the first non-empty one. Ignored on InfiniBand, which uses LIDs.
	GIDIndex int
	// IfName, when Device is empty, names the network interface whose
	// RDMA device to use (found with rdmamap through sysfs).
	IfName string
	// Log, when set, receives the chosen device, port, GID and MTU, and
	// a line per lost peer (subsystem logging.RDMA).
	Log *logging.Logger

	// KeyPrefix prefixes the store keys (default "rdma"), so several
	// transports can be set up through one store.
	KeyPrefix string
	// EagerLimit is the largest message sent eagerly through the ring
	// (default 8 KiB; the public API passes SPARCML_RDMA_EAGER); larger ones use
	// rendezvous (zero copy). Every rank must use the same value.
	EagerLimit int
	// Slots is the number of ring slots per peer (default 32): the eager
	// messages one rank may have in flight to another.
	Slots int
	// KeepAlive is how often an idle connection is probed so that a dead
	// peer is noticed even by a rank that only receives (default 1 s).
	KeepAlive time.Duration
	// Spin is how long the progress loop busy-polls an idle completion
	// queue before blocking on its completion channel (default 50 us; on
	// a software device none; the public API passes SPARCML_RDMA_SPIN);
	// negative blocks at once.
	Spin time.Duration
	// WaitSpin is how long a goroutine waiting on a request busy-polls
	// the completion queue itself before it sleeps until the progress
	// goroutine wakes it (default 20 ms; on a software device 200 us; the
	// public API passes SPARCML_RDMA_WAIT_SPIN); negative never polls. Where waking a sleeping
	// thread is slow (virtual machines, emulation) this is most of a
	// message's latency.
	//
	// On a software device (soft-RoCE rxe, see softDevice) the "NIC" is
	// the kernel running on the same CPUs, mostly in the context of the
	// thread that posts a work request, and for one machine's ranks in
	// the sender's context: a busy-polling waiter takes CPU from exactly
	// the work it waits for, so both poll little or not at all there.
	WaitSpin time.Duration
	// NoAdvertise turns off receiver-advertised rendezvous (a receive
	// posted before its RTS offers its buffer at once), as
	// SPARCML_RDMA_ADVERTISE=0 does through the public API.
	NoAdvertise bool
	// AckTimeout is the RC ack timeout exponent: a lost packet is resent
	// after 4.096 us << AckTimeout (default 15: 134 ms).
	AckTimeout uint8
	// RetryCount is how many times in a row a packet is resent without
	// progress before the peer is declared lost (default 6, so about 1 s
	// by default). 7 retries forever on soft-RoCE, which then never
	// notices a dead peer, but survives very lossy links.
	RetryCount uint8
	// UnexpectedLimit is the per-peer budget of bytes of eager messages
	// that arrived before their receive was posted (default 64 MiB).
	// When it is spent, the peer's ring slots stay occupied until
	// receives are posted, so the peer runs out of credits and its sends
	// wait: memory stays bounded.
	UnexpectedLimit int64
	// CacheEntries and CacheBytes bound the registration cache for user
	// buffers (defaults 1024 and 1 GiB).
	CacheEntries int
	CacheBytes   int64
}

const (
	defaultEager     = 8 << 10
	defaultSlots     = 32
	defaultKeepAlive = time.Second
	defaultSpin      = 50 * time.Microsecond
	defaultWaitSpin  = 20 * time.Millisecond
	// On a software device a waiter polls only briefly: long enough to
	// catch a reply already on its way, not so long that it takes the
	// CPU from the kernel work it waits for.
	softWaitSpin = 200 * time.Microsecond
	// 4.096 us << 15 = 134 ms per try, 6 tries: a dead peer is noticed in
	// about a second.
	defaultAckTimeout = 15
	defaultRetryCount = 6
	// The TCP transport's default budget.
	defaultUnexpectedLimit = 64 << 20
)

func (c *Config) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "rdma"
	}
	if c.EagerLimit <= 0 {
		c.EagerLimit = defaultEager
	}
	if c.Slots <= 0 {
		c.Slots = defaultSlots
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = defaultKeepAlive
	}
	// Spin and WaitSpin left at zero are resolved once the device is
	// known (setSpinDefaults).
	if c.AckTimeout == 0 {
		c.AckTimeout = defaultAckTimeout
	}
	if c.RetryCount == 0 {
		c.RetryCount = defaultRetryCount
	}
	if c.UnexpectedLimit == 0 {
		c.UnexpectedLimit = defaultUnexpectedLimit
	}
	if c.CacheEntries <= 0 {
		c.CacheEntries = 1024
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = 1 << 30
	}
}

// setSpinDefaults fills in Spin and WaitSpin when the caller left them at
// zero: on a software device (see Config.WaitSpin) no
// idle polling by the progress loop and a short one by waiters, the
// defaults elsewhere.
func (c *Config) setSpinDefaults(soft bool) {
	if c.Spin == 0 {
		c.Spin = defaultSpin
		if soft {
			c.Spin = -1
		}
	}
	if c.WaitSpin == 0 {
		c.WaitSpin = defaultWaitSpin
		if soft {
			c.WaitSpin = softWaitSpin
		}
	}
}

// softDevice reports whether the RDMA device name is soft-RoCE (rxe), the
// one software device rdmainfo tells apart: it has no bus device of its
// own, only the network interface it runs on.
func softDevice(name string) bool {
	d, err := rdmainfo.Driver(name)
	return err == nil && d == "rxe"
}

func (c *Config) validate() error {
	switch {
	case c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("rdma: rank %d out of range for size %d", c.Rank, c.Size)
	case c.Size > 1<<15:
		return fmt.Errorf("rdma: size %d too large (max %d)", c.Size, 1<<15)
	case c.Store == nil && c.Size > 1:
		return errors.New("rdma: Config.Store is required")
	case c.Slots > 1<<12:
		return fmt.Errorf("rdma: %d ring slots per peer, max %d", c.Slots, 1<<12)
	case c.EagerLimit > 1<<20:
		return fmt.Errorf("rdma: eager limit %d above 1 MiB", c.EagerLimit)
	case c.AckTimeout > 31 || c.RetryCount > 7:
		return fmt.Errorf("rdma: ack timeout %d (max 31) or retry count %d (max 7) out of range", c.AckTimeout, c.RetryCount)
	case c.GIDIndex < -1:
		return fmt.Errorf("rdma: GID index %d (use -1 for automatic)", c.GIDIndex)
	case c.UnexpectedLimit < 0:
		return fmt.Errorf("rdma: negative UnexpectedLimit %d", c.UnexpectedLimit)
	}
	return nil
}

// parseDevice splits "rxe0:1" into device and port (0: any).
func parseDevice(s string) (string, uint8, error) {
	name, portStr, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	p, err := strconv.ParseUint(portStr, 10, 8)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("rdma: bad device %q: want NAME or NAME:PORT with PORT >= 1", s)
	}
	return name, uint8(p), nil
}

// endpoint is the chosen device, port and GID.
type endpoint struct {
	ctx  *verbs.Context
	port uint8
	attr verbs.PortAttr
	gid  verbs.GIDEntry
}

// openEndpoint resolves Device/IfName to an open device and an active port.
func openEndpoint(cfg *Config) (*endpoint, error) {
	name, port, err := parseDevice(cfg.Device)
	if err != nil {
		return nil, err
	}
	if name == "" && cfg.IfName != "" {
		name, err = rdmamap.GetRdmaDeviceForNetdevice(cfg.IfName)
		if err != nil {
			return nil, fmt.Errorf("rdma: no RDMA device behind interface %s: %w", cfg.IfName, err)
		}
	}
	names := []string{name}
	if name == "" {
		if names, err = verbs.Devices(); err != nil {
			return nil, err
		}
	}
	var why []string
	for _, n := range names {
		ep, err := tryDevice(n, port)
		if err == nil {
			return ep, nil
		}
		if name != "" {
			return nil, err
		}
		why = append(why, err.Error())
	}
	return nil, fmt.Errorf("%w: no active RDMA port (%s)", verbs.ErrUnavailable, strings.Join(why, "; "))
}

func tryDevice(name string, port uint8) (*endpoint, error) {
	ctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	da, err := ctx.QueryDevice()
	if err != nil {
		ctx.Close()
		return nil, err
	}
	ports := []uint8{port}
	if port == 0 {
		ports = nil
		for p := 1; p <= da.PhysPortCnt; p++ {
			ports = append(ports, uint8(p))
		}
	}
	var states []string
	for _, p := range ports {
		pa, err := ctx.QueryPort(p)
		if err != nil {
			ctx.Close()
			return nil, err
		}
		if pa.State == verbs.PortActive {
			return &endpoint{ctx: ctx, port: p, attr: pa}, nil
		}
		states = append(states, fmt.Sprintf("%s port %d is %s", name, p, pa.State))
	}
	ctx.Close()
	if len(states) == 0 {
		return nil, fmt.Errorf("rdma: %s has no port %d", name, port)
	}
	return nil, fmt.Errorf("rdma: %s", strings.Join(states, ", "))
}

// chooseGID picks the GID for RoCE; InfiniBand addresses by LID and only
// reports GID 0.
func (ep *endpoint) chooseGID(index int) error {
	where := fmt.Sprintf("%s port %d", ep.ctx.Name(), ep.port)
	if ep.attr.LinkLayer != verbs.LinkLayerEthernet {
		if index < 0 {
			index = 0
		}
		e, err := ep.ctx.QueryGID(ep.port, index)
		if err != nil {
			return err
		}
		ep.gid = e
		return nil
	}
	table, err := ep.ctx.GIDTable(ep.port)
	if err != nil {
		return err
	}
	if len(table) == 0 {
		return fmt.Errorf("rdma: %s has no GID (RoCE needs an IP address on the interface)", where)
	}
	if index >= 0 {
		for _, e := range table {
			if e.Index == index {
				ep.gid = e
				return nil
			}
		}
		return fmt.Errorf("rdma: GID index %d on %s is empty or out of range; valid entries: %s",
			index, where, describeGIDs(table))
	}
	best, score := table[0], -1
	for _, e := range table {
		s := 0
		if e.Type == verbs.GIDTypeRoCEv2 {
			s += 2
		}
		if e.GID.IPv4Mapped() {
			s++
		}
		if s > score {
			best, score = e, s
		}
	}
	ep.gid = best
	return nil
}

func describeGIDs(table []verbs.GIDEntry) string {
	var parts []string
	for _, e := range table {
		parts = append(parts, fmt.Sprintf("%d=%v(%v)", e.Index, e.GID, e.Type))
	}
	return strings.Join(parts, " ")
}

// Available returns nil when a usable RDMA port exists here, and
// otherwise an error wrapping verbs.ErrUnavailable that says why. It is
// what "--transport auto" asks.
func Available() error {
	names, err := verbs.Devices()
	if err != nil {
		return err
	}
	var why []string
	for _, n := range names {
		ep, err := tryDevice(n, 0)
		if err == nil {
			ep.ctx.Close()
			return nil
		}
		why = append(why, err.Error())
	}
	return fmt.Errorf("%w: no active RDMA port (%s)", verbs.ErrUnavailable, strings.Join(why, "; "))
}
