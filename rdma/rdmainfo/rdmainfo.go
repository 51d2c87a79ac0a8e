// Package rdmainfo lists the RDMA devices of this machine, their ports, GIDs,
// counters and the network interfaces behind them, from sysfs alone (no cgo,
// no libibverbs), for `sparcml devices` and for diagnostics in error messages.
//
// The information comes from /sys/class/infiniband/<dev>/ (node GUID, node
// type, firmware, ports/<p>/{state,phys_state,link_layer,rate,lid,gids/<i>,
// gid_attrs/types/<i>,gid_attrs/ndevs/<i>,counters/,hw_counters/}) and from
// github.com/Mellanox/rdmamap for the character devices (/dev/infiniband/...)
// that user space opens. Attributes a driver does not provide (soft-RoCE has
// no PMA, so most of counters/ fails to read) are left empty rather than
// turned into errors.
package rdmainfo

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// Device is one RDMA device (an HCA, a RoCE NIC function, a soft-RoCE rxe).
type Device struct {
	Name         string   // e.g. mlx5_0, rxe0
	NodeGUID     string   // as printed by the kernel, e.g. 5054:00ff:fec7:0001
	SysImageGUID string   //
	NodeType     string   // CA, switch, RNIC...
	NodeDesc     string   // free-form node description
	FirmwareVer  string   // fw_ver, empty when the driver has none
	HCAType      string   // hca_type, empty when the driver has none
	BoardID      string   // board_id, empty when the driver has none
	Driver       string   // kernel driver of the parent device, "rxe" for soft-RoCE
	Netdevs      []string // network interfaces behind the device, sorted
	CharDevices  []string // /dev/infiniband/... nodes for the device
	Ports        []Port   // by port number
}

// Port is one port of a Device.
type Port struct {
	Number     int
	State      string // DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
	PhysState  string // Sleep, Polling, Disabled, LinkUp, ...
	LinkLayer  string // InfiniBand or Ethernet
	Rate       string // e.g. "100 Gb/sec (4X EDR)"; empty if unreadable
	LID        uint32 // InfiniBand only
	SMLID      uint32 // InfiniBand only
	GIDs       []GID  // populated entries of the GID table, by index
	Counters   map[string]uint64
	HWCounters map[string]uint64
}

// GID is one populated entry of a port's GID table.
type GID struct {
	Index  int
	Raw    string // as in sysfs, e.g. 0000:0000:0000:0000:0000:ffff:0ac7:0001
	IP     net.IP // the GID as an address (an IPv4 address for IPv4-mapped GIDs)
	Type   string // "IB/RoCE v1" or "RoCE v2"; empty when the driver has none
	Netdev string // RoCE: the network interface the GID belongs to
}

// Active reports whether the port can carry traffic.
func (p Port) Active() bool { return p.State == "ACTIVE" }

// PreferredGID is the GID a RoCE connection should use by default: the first
// RoCE v2 GID with an IPv4 address (routable, and what perftest's -x 1 picks
// on soft-RoCE), else the first RoCE v2 GID, else the first populated one
// (InfiniBand: index 0). ok is false when the table is empty.
func (p Port) PreferredGID() (g GID, ok bool) {
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" && g.IP.To4() != nil {
			return g, true
		}
	}
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" {
			return g, true
		}
	}
	if len(p.GIDs) > 0 {
		return p.GIDs[0], true
	}
	return GID{}, false
}

// Counter names of the standard port counters (ports/<p>/counters). The data
// counters count 4-byte words.
const (
	CounterXmitData    = "port_xmit_data"
	CounterRcvData     = "port_rcv_data"
	CounterXmitPackets = "port_xmit_packets"
	CounterRcvPackets  = "port_rcv_packets"
)

// DefaultSysfs is where Devices looks for the kernel's RDMA classes.
const DefaultSysfs = "/sys"

// Devices lists the RDMA devices of this machine, sorted by name. A machine
// without RDMA devices (no driver, no rdma_rxe) yields an empty list and no
// error.
func Devices() ([]Device, error) {
	return scanner{root: DefaultSysfs, charDevices: rdmamap.GetRdmaCharDevices}.devices()
}

// ErrNoDevice is returned by Lookup when the device does not exist.
var ErrNoDevice = errors.New("no such RDMA device")

// Lookup returns the device called name.
func Lookup(name string) (Device, error) {
	ds, err := Devices()
	if err != nil {
		return Device{}, err
	}
	for _, d := range ds {
		if d.Name == name {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("%w: %q (found %s)", ErrNoDevice, name, names(ds))
}

// Driver returns what Lookup(name).Driver would, reading only the two
// attributes it comes from rather than the whole device (its counters are
// firmware queries on some NICs).
func Driver(name string) (string, error) {
	return scanner{root: DefaultSysfs}.driver(name)
}

func (s scanner) driver(name string) (string, error) {
	dir := filepath.Join(s.classDir(), name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %q", ErrNoDevice, name)
		}
		return "", fmt.Errorf("rdmainfo: %w", err)
	}
	return driverOf(dir), nil
}

// driverOf is the kernel driver of the bus device behind the RDMA device
// directory dir, or "rxe" for a soft-RoCE device, which has no bus device
// and whose "parent" names its netdev.
func driverOf(dir string) string {
	if link, err := os.Readlink(filepath.Join(dir, "device", "driver")); err == nil {
		return filepath.Base(link)
	}
	if readString(filepath.Join(dir, "parent")) != "" {
		return "rxe"
	}
	return ""
}

func names(ds []Device) string {
	if len(ds) == 0 {
		return "none"
	}
	n := make([]string, len(ds))
	for i, d := range ds {
		n[i] = d.Name
	}
	return strings.Join(n, ", ")
}

// scanner reads one sysfs tree; root is a parameter so tests can build a
// fake one.
type scanner struct {
	root        string
	charDevices func(dev string) []string // nil: read them from root
}

func (s scanner) classDir() string { return filepath.Join(s.root, "class", "infiniband") }

func (s scanner) devices() ([]Device, error) {
	entries, err := os.ReadDir(s.classDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdmainfo: %w", err)
	}
	var ds []Device
	for _, e := range entries {
		d, err := s.device(e.Name())
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].Name < ds[j].Name })
	return ds, nil
}

func (s scanner) device(name string) (Device, error) {
	dir := filepath.Join(s.classDir(), name)
	d := Device{
		Name:         name,
		NodeGUID:     readString(filepath.Join(dir, "node_guid")),
		SysImageGUID: readString(filepath.Join(dir, "sys_image_guid")),
		NodeType:     stripCode(readString(filepath.Join(dir, "node_type"))),
		NodeDesc:     readString(filepath.Join(dir, "node_desc")),
		FirmwareVer:  readString(filepath.Join(dir, "fw_ver")),
		HCAType:      readString(filepath.Join(dir, "hca_type")),
		BoardID:      readString(filepath.Join(dir, "board_id")),
	}
	d.Driver = driverOf(dir)

	netdevs := map[string]bool{}
	if parent := readString(filepath.Join(dir, "parent")); parent != "" {
		netdevs[parent] = true
	}
	// Interfaces of the same bus device (IPoIB, or the Ethernet function of
	// a RoCE NIC).
	if nets, err := os.ReadDir(filepath.Join(dir, "device", "net")); err == nil {
		for _, n := range nets {
			netdevs[n.Name()] = true
		}
	}

	portEntries, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Device{}, fmt.Errorf("rdmainfo: device %s: %w", name, err)
	}
	for _, pe := range portEntries {
		num, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		p := s.port(filepath.Join(dir, "ports", pe.Name()), num)
		for _, g := range p.GIDs {
			if g.Netdev != "" {
				netdevs[g.Netdev] = true
			}
		}
		d.Ports = append(d.Ports, p)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number })

	for n := range netdevs {
		d.Netdevs = append(d.Netdevs, n)
	}
	sort.Strings(d.Netdevs)

	if s.charDevices != nil {
		d.CharDevices = s.charDevices(name)
	} else {
		d.CharDevices = s.charDevicesFromRoot(name)
	}
	sort.Strings(d.CharDevices)
	return d, nil
}

func (s scanner) port(dir string, num int) Port {
	p := Port{
		Number:    num,
		State:     stripCode(readString(filepath.Join(dir, "state"))),
		PhysState: stripCode(readString(filepath.Join(dir, "phys_state"))),
		LinkLayer: readString(filepath.Join(dir, "link_layer")),
		Rate:      readString(filepath.Join(dir, "rate")),
	}
	if p.LinkLayer == "InfiniBand" {
		p.LID = uint32(readHex(filepath.Join(dir, "lid")))
		p.SMLID = uint32(readHex(filepath.Join(dir, "sm_lid")))
	}
	p.GIDs = readGIDs(dir)
	p.Counters = readCounters(filepath.Join(dir, "counters"))
	p.HWCounters = readCounters(filepath.Join(dir, "hw_counters"))
	// hw_counters/lifespan is the kernel's refresh interval (ms), not a count.
	delete(p.HWCounters, "lifespan")
	return p
}

func readGIDs(portDir string) []GID {
	entries, err := os.ReadDir(filepath.Join(portDir, "gids"))
	if err != nil {
		return nil
	}
	var gids []GID
	for _, e := range entries {
		idx, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw := readString(filepath.Join(portDir, "gids", e.Name()))
		ip := parseGID(raw)
		if ip == nil || ip.IsUnspecified() {
			continue // unpopulated entry (the kernel shows all zeros)
		}
		gids = append(gids, GID{
			Index:  idx,
			Raw:    raw,
			IP:     ip,
			Type:   readString(filepath.Join(portDir, "gid_attrs", "types", e.Name())),
			Netdev: readString(filepath.Join(portDir, "gid_attrs", "ndevs", e.Name())),
		})
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

// parseGID parses the kernel's GID format: eight groups of four hex digits.
func parseGID(s string) net.IP {
	groups := strings.Split(s, ":")
	if len(groups) != 8 {
		return nil
	}
	ip := make(net.IP, net.IPv6len)
	for i, g := range groups {
		if len(g) != 4 {
			return nil
		}
		v, err := strconv.ParseUint(g, 16, 16)
		if err != nil {
			return nil
		}
		ip[2*i] = byte(v >> 8)
		ip[2*i+1] = byte(v)
	}
	return ip
}

// readCounters reads every counter file of dir; files that fail to read
// (drivers without a PMA return EINVAL) are left out.
func readCounters(dir string) map[string]uint64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var m map[string]uint64
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		if m == nil {
			m = map[string]uint64{}
		}
		m[e.Name()] = v
	}
	return m
}

// charDevicesFromRoot finds the uverbs/umad/issm nodes of dev the way rdmamap
// does, but under s.root.
func (s scanner) charDevicesFromRoot(dev string) []string {
	var out []string
	for _, class := range []string{"infiniband_verbs", "infiniband_mad", "infiniband_cm"} {
		entries, err := os.ReadDir(filepath.Join(s.root, "class", class))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if readString(filepath.Join(s.root, "class", class, e.Name(), "ibdev")) == dev {
				out = append(out, filepath.Join("/dev/infiniband", e.Name()))
			}
		}
	}
	return out
}

// readString returns the trimmed contents of a sysfs attribute, or "" when it
// is missing or unreadable (many attributes are optional or driver-specific).
func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readHex(path string) uint64 {
	s := strings.TrimPrefix(readString(path), "0x")
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0
	}
	return v
}

// stripCode turns "4: ACTIVE" into "ACTIVE" and "1: CA" into "CA".
func stripCode(s string) string {
	if i := strings.Index(s, ": "); i >= 0 {
		if _, err := strconv.Atoi(s[:i]); err == nil {
			return s[i+2:]
		}
	}
	return s
}
