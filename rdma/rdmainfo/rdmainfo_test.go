package rdmainfo

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSysfs builds a sysfs-like tree under a temporary root.
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFakeSysfs(t *testing.T) *fakeSysfs {
	return &fakeSysfs{t: t, root: t.TempDir()}
}

func (f *fakeSysfs) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.WriteFile(p, []byte(content), 0o644))
}

// unreadable makes an attribute that fails to read, like the counters of a
// driver without a PMA (the kernel returns EINVAL): a directory in its place.
func (f *fakeSysfs) unreadable(rel string) {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(filepath.Join(f.root, rel), 0o755))
}

func (f *fakeSysfs) symlink(target, rel string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.Symlink(target, p))
}

func (f *fakeSysfs) scan() ([]Device, error) {
	return scanner{root: f.root}.devices()
}

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000\n"

// addRxe adds a soft-RoCE device the way rdma_rxe 6.1 shows it.
func (f *fakeSysfs) addRxe(name, netdev, ipv4Hex string) {
	d := "class/infiniband/" + name + "/"
	f.write(d+"node_guid", "5054:00ff:fec7:0001\n")
	f.write(d+"sys_image_guid", "5054:00ff:fec7:0001\n")
	f.write(d+"node_type", "1: CA\n")
	f.write(d+"node_desc", "rxe0\n")
	f.write(d+"fw_ver", "0.0.0\n")
	f.write(d+"hca_type", "\n")
	f.write(d+"parent", netdev+"\n")
	p := d + "ports/1/"
	f.write(p+"state", "4: ACTIVE\n")
	f.write(p+"phys_state", "5: LinkUp\n")
	f.write(p+"link_layer", "Ethernet\n")
	f.write(p+"rate", "10 Gb/sec (1X QDR)\n")
	f.write(p+"lid", "0x0\n")
	f.write(p+"gids/0", "fe80:0000:0000:0000:5054:00ff:fec7:0001\n")
	f.write(p+"gid_attrs/types/0", "RoCE v2\n")
	f.write(p+"gid_attrs/ndevs/0", netdev+"\n")
	f.write(p+"gids/1", "0000:0000:0000:0000:0000:ffff:"+ipv4Hex+"\n")
	f.write(p+"gid_attrs/types/1", "RoCE v2\n")
	f.write(p+"gid_attrs/ndevs/1", netdev+"\n")
	for i := 2; i < 4; i++ {
		n := string(rune('0' + i))
		f.write(p+"gids/"+n, zeroGID)
		f.unreadable(p + "gid_attrs/types/" + n) // EINVAL on empty entries
		f.unreadable(p + "gid_attrs/ndevs/" + n)
	}
	f.unreadable(p + "counters/port_xmit_data")
	f.unreadable(p + "counters/port_rcv_data")
	f.write(p+"hw_counters/sent_pkts", "1234\n")
	f.write(p+"hw_counters/rcvd_pkts", "1200\n")
	f.write(p+"hw_counters/duplicate_request", "0\n")
	f.write(p+"hw_counters/lifespan", "10\n") // the refresh interval, not a counter
	f.write("class/infiniband_verbs/uverbs0/ibdev", name+"\n")
}

// addIB adds a two-port InfiniBand HCA with PCI parent and IPoIB netdev.
func (f *fakeSysfs) addIB(name string) {
	d := "class/infiniband/" + name + "/"
	f.write(d+"node_guid", "0c42:a103:0065:7a1e\n")
	f.write(d+"node_type", "1: CA\n")
	f.write(d+"fw_ver", "20.31.1014\n")
	f.write(d+"hca_type", "MT4123\n")
	f.write(d+"board_id", "MT_0000000223\n")
	f.symlink("../../../bus/pci/drivers/mlx5_core", d+"device/driver")
	f.write(d+"device/net/ib0/ifindex", "5\n")
	for _, port := range []string{"1", "2"} {
		p := d + "ports/" + port + "/"
		f.write(p+"link_layer", "InfiniBand\n")
		f.write(p+"gids/0", "fe80:0000:0000:0000:0c42:a103:0065:7a1e\n")
		f.unreadable(p + "gid_attrs/types/0")
		f.unreadable(p + "gid_attrs/ndevs/0")
	}
	p1 := d + "ports/1/"
	f.write(p1+"state", "4: ACTIVE\n")
	f.write(p1+"phys_state", "5: LinkUp\n")
	f.write(p1+"rate", "200 Gb/sec (4X HDR)\n")
	f.write(p1+"lid", "0x1a\n")
	f.write(p1+"sm_lid", "0x1\n")
	f.write(p1+"counters/port_xmit_data", "262144\n")
	f.write(p1+"counters/port_rcv_data", "512\n")
	f.write(p1+"counters/port_xmit_packets", "300\n")
	f.write(p1+"counters/port_rcv_packets", "20\n")
	f.write(p1+"counters/symbol_error", "3\n")
	f.write(p1+"counters/link_downed", "0\n")
	p2 := d + "ports/2/"
	f.write(p2+"state", "1: DOWN\n")
	f.write(p2+"phys_state", "3: Disabled\n")
	f.write(p2+"rate", "10 Gb/sec (4X SDR)\n")
	f.write(p2+"lid", "0xffff\n")
	f.write("class/infiniband_verbs/uverbs1/ibdev", name+"\n")
	f.write("class/infiniband_mad/umad0/ibdev", name+"\n")
	f.write("class/infiniband_mad/issm0/ibdev", name+"\n")
}

func TestNoSysfsClass(t *testing.T) {
	f := newFakeSysfs(t)
	ds, err := f.scan()
	require.NoError(t, err)
	assert.Empty(t, ds)

	var b bytes.Buffer
	require.NoError(t, Report(&b, ds))
	assert.Equal(t, NoDevicesMessage+"\n", b.String())
}

func TestEmptyClass(t *testing.T) {
	f := newFakeSysfs(t)
	f.unreadable("class/infiniband")
	ds, err := f.scan()
	require.NoError(t, err)
	assert.Empty(t, ds)
}

func TestSoftRoCE(t *testing.T) {
	f := newFakeSysfs(t)
	f.addRxe("rxe0", "eth0", "0ac7:0001")
	ds, err := f.scan()
	require.NoError(t, err)
	require.Len(t, ds, 1)
	d := ds[0]
	assert.Equal(t, "rxe0", d.Name)
	assert.Equal(t, "5054:00ff:fec7:0001", d.NodeGUID)
	assert.Equal(t, "CA", d.NodeType)
	assert.Equal(t, "rxe", d.Driver)
	assert.Equal(t, "", d.HCAType)
	assert.Equal(t, []string{"eth0"}, d.Netdevs)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0"}, d.CharDevices)

	require.Len(t, d.Ports, 1)
	p := d.Ports[0]
	assert.Equal(t, 1, p.Number)
	assert.True(t, p.Active())
	assert.Equal(t, "LinkUp", p.PhysState)
	assert.Equal(t, "Ethernet", p.LinkLayer)
	assert.Equal(t, "10 Gb/sec (1X QDR)", p.Rate)
	assert.Zero(t, p.LID)

	require.Len(t, p.GIDs, 2, "all-zero GID entries are skipped")
	assert.Equal(t, 0, p.GIDs[0].Index)
	assert.Equal(t, "fe80::5054:ff:fec7:1", p.GIDs[0].IP.String())
	assert.Equal(t, 1, p.GIDs[1].Index)
	assert.True(t, p.GIDs[1].IP.Equal(net.IPv4(10, 199, 0, 1)))
	assert.Equal(t, "RoCE v2", p.GIDs[1].Type)
	assert.Equal(t, "eth0", p.GIDs[1].Netdev)
	assert.Equal(t, "0000:0000:0000:0000:0000:ffff:0ac7:0001", p.GIDs[1].Raw)

	g, ok := p.PreferredGID()
	require.True(t, ok)
	assert.Equal(t, 1, g.Index, "the IPv4-mapped RoCE v2 GID")

	assert.Empty(t, p.Counters, "unreadable counters are left out")
	assert.Equal(t, map[string]uint64{
		"sent_pkts": 1234, "rcvd_pkts": 1200, "duplicate_request": 0,
	}, p.HWCounters, "lifespan is not a counter")

	var b bytes.Buffer
	require.NoError(t, Report(&b, ds))
	out := b.String()
	for _, want := range []string{
		"rxe0\n",
		"node GUID:     5054:00ff:fec7:0001",
		"driver:        rxe",
		"netdevs:       eth0",
		"char devices:  /dev/infiniband/uverbs0",
		"port 1: ACTIVE (LinkUp), Ethernet, 10 Gb/sec (1X QDR)\n",
		"    1    10.199.0.1            RoCE v2  eth0\n",
		"    hw counters: rcvd_pkts=1200 sent_pkts=1234\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "HCA type", "empty attributes are not printed")
	assert.NotContains(t, out, "traffic:")
	t.Log("\n" + out)
}

func TestInfiniBandAndOrdering(t *testing.T) {
	f := newFakeSysfs(t)
	f.addRxe("rxe0", "eth1", "c0a8:0102")
	f.addIB("mlx5_0")
	ds, err := f.scan()
	require.NoError(t, err)
	require.Len(t, ds, 2)
	assert.Equal(t, "mlx5_0", ds[0].Name, "sorted by name")
	assert.Equal(t, "rxe0", ds[1].Name)

	d := ds[0]
	assert.Equal(t, "mlx5_core", d.Driver)
	assert.Equal(t, "20.31.1014", d.FirmwareVer)
	assert.Equal(t, "MT4123", d.HCAType)
	assert.Equal(t, []string{"ib0"}, d.Netdevs)
	assert.Equal(t, []string{"/dev/infiniband/issm0", "/dev/infiniband/umad0", "/dev/infiniband/uverbs1"}, d.CharDevices)
	require.Len(t, d.Ports, 2)
	p1, p2 := d.Ports[0], d.Ports[1]
	assert.True(t, p1.Active())
	assert.Equal(t, uint32(0x1a), p1.LID)
	assert.Equal(t, uint32(1), p1.SMLID)
	assert.Equal(t, "InfiniBand", p1.LinkLayer)
	require.Len(t, p1.GIDs, 1)
	assert.Empty(t, p1.GIDs[0].Type)
	assert.Equal(t, uint64(262144), p1.Counters[CounterXmitData])
	g, ok := p1.PreferredGID()
	require.True(t, ok)
	assert.Equal(t, 0, g.Index, "InfiniBand: the first GID")
	_, ok = Port{}.PreferredGID()
	assert.False(t, ok)
	assert.False(t, p2.Active())
	assert.Equal(t, "DOWN", p2.State)
	assert.Equal(t, "Disabled", p2.PhysState)

	var b bytes.Buffer
	require.NoError(t, Report(&b, ds))
	out := b.String()
	for _, want := range []string{
		"mlx5_0\n",
		"port 1: ACTIVE (LinkUp), InfiniBand, 200 Gb/sec (4X HDR), LID 0x1a, SM LID 0x1\n",
		"port 2: DOWN (Disabled), InfiniBand, 10 Gb/sec (4X SDR), LID 0xffff, SM LID 0x0\n",
		"traffic: sent 1.0 MiB in 300 packets, received 2.0 KiB in 20 packets\n",
		"counters: symbol_error=3\n",
		"\n\nrxe0\n",
		"192.168.1.2",
	} {
		assert.Contains(t, out, want)
	}
	assert.Less(t, strings.Index(out, "mlx5_0"), strings.Index(out, "rxe0"))
}

// Driver reads only the driver attributes and agrees with the full scan.
func TestDriver(t *testing.T) {
	f := newFakeSysfs(t)
	f.addRxe("rxe0", "eth1", "c0a8:0102")
	f.addIB("mlx5_0")
	f.write("class/infiniband/bare0/node_type", "1: CA\n")
	ds, err := f.scan()
	require.NoError(t, err)
	require.Len(t, ds, 3)
	for _, d := range ds {
		drv, err := scanner{root: f.root}.driver(d.Name)
		require.NoError(t, err)
		assert.Equal(t, d.Driver, drv, d.Name)
	}
	assert.Equal(t, []string{"", "mlx5_core", "rxe"}, []string{ds[0].Driver, ds[1].Driver, ds[2].Driver})
	_, err = scanner{root: f.root}.driver("mlx5_9")
	assert.ErrorIs(t, err, ErrNoDevice)
}

func TestParseHelpers(t *testing.T) {
	assert.Equal(t, "ACTIVE", stripCode("4: ACTIVE"))
	assert.Equal(t, "LinkUp", stripCode("5: LinkUp"))
	assert.Equal(t, "weird: value", stripCode("weird: value"))
	assert.Equal(t, "", stripCode(""))

	assert.Nil(t, parseGID(""))
	assert.Nil(t, parseGID("fe80::1"))
	assert.Nil(t, parseGID("zz80:0000:0000:0000:0000:0000:0000:0001"))
	assert.Equal(t, "fe80::1", parseGID("fe80:0000:0000:0000:0000:0000:0000:0001").String())

	assert.Equal(t, "0 B", bytesString(0))
	assert.Equal(t, "1023 B", bytesString(1023))
	assert.Equal(t, "1.5 KiB", bytesString(1536))
	assert.Equal(t, "4.0 GiB", bytesString(4<<30))
}

func TestDeviceWithoutPorts(t *testing.T) {
	f := newFakeSysfs(t)
	f.write("class/infiniband/odd0/node_guid", "0000:0000:0000:0001\n")
	ds, err := f.scan()
	require.NoError(t, err)
	require.Len(t, ds, 1)
	var b bytes.Buffer
	require.NoError(t, Report(&b, ds))
	assert.Contains(t, b.String(), "netdevs:    none")
	assert.Contains(t, b.String(), "  no ports\n")
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, io.ErrClosedPipe
	}
	w.n--
	return len(p), nil
}

func TestReportWriteError(t *testing.T) {
	f := newFakeSysfs(t)
	f.addIB("mlx5_0")
	ds, err := f.scan()
	require.NoError(t, err)
	for n := 0; n < 5; n++ {
		err := Report(&failWriter{n: n}, ds)
		assert.True(t, errors.Is(err, io.ErrClosedPipe), "after %d writes: %v", n, err)
	}
	assert.ErrorIs(t, Report(&failWriter{}, nil), io.ErrClosedPipe)
}

// TestHost runs against the real sysfs: it must not fail on a machine
// without RDMA, and must agree with Report's empty-list message there.
func TestHost(t *testing.T) {
	ds, err := Devices()
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, Report(&b, ds))
	if len(ds) == 0 {
		assert.Equal(t, NoDevicesMessage+"\n", b.String())
	}
	t.Log("\n" + b.String())
	_, err = Lookup("no-such-device0")
	assert.ErrorIs(t, err, ErrNoDevice)
}
