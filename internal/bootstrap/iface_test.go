package bootstrap

import (
	"net"
	"strings"
	"testing"
)

func TestChooseAddrLoopbackByName(t *testing.T) {
	ip, name, err := ChooseAddr("lo", "")
	if err != nil {
		t.Fatal(err)
	}
	if name != "lo" || !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("ChooseAddr(lo) = %v on %q, want 127.0.0.1 on lo", ip, name)
	}
	ip, name, err = ChooseAddr("=lo", "10.0.0.1:29500")
	if err != nil || name != "lo" || !ip.IsLoopback() {
		t.Fatalf("ChooseAddr(=lo) = %v on %q, %v", ip, name, err)
	}
}

func TestChooseAddrUnknownName(t *testing.T) {
	_, _, err := ChooseAddr("nosuchif9", "")
	if err == nil {
		t.Fatal("an unknown interface was accepted")
	}
	for _, want := range []string{`"nosuchif9"`, "SPARCML_IFNAME", "available:", "lo ["} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if _, _, err := ChooseAddr("^,", ""); err == nil {
		t.Error("an empty interface list was accepted")
	}
}

func TestChooseAddrLoopbackRendezvous(t *testing.T) {
	ip, name, err := ChooseAddr("", "127.0.0.1:29500")
	if err != nil {
		t.Fatal(err)
	}
	if name != "lo" || !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("ChooseAddr for a loopback rendezvous = %v on %q, want 127.0.0.1 on lo", ip, name)
	}
}

// TestChooseAddrRoutes checks that, whatever this machine's interfaces,
// the address chosen for a rendezvous elsewhere belongs to the interface
// named, is not loopback when another interface is up, and is the one the
// kernel routes through.
func TestChooseAddrRoutes(t *testing.T) {
	ifaces, err := systemInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	const far = "192.0.2.1:29500" // TEST-NET-1: routed by a default route if there is one
	ip, name, err := ChooseAddr("", far)
	if err != nil {
		t.Fatal(err)
	}
	if _, owned, ok := owner(ifaces, ip); !ok || owned != name {
		t.Fatalf("ChooseAddr = %v on %q, but that address belongs to %q", ip, name, owned)
	}
	if src := routeSource(far); src != nil && !src.Equal(ip) {
		t.Errorf("ChooseAddr = %v, but the kernel routes %s from %v", ip, far, src)
	}
}

func TestChooseByName(t *testing.T) {
	ifaces := []ifaceInfo{
		{name: "lo", up: true, loopback: true, ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}},
		{name: "eth0", up: true, ips: []net.IP{net.ParseIP("fe80::1"), net.ParseIP("10.0.0.5")}},
		{name: "eth1", up: false, ips: []net.IP{net.ParseIP("10.0.1.5")}},
		{name: "ib0", up: true, ips: []net.IP{net.ParseIP("fd00::5")}},
		{name: "ib1", up: true, ips: []net.IP{net.ParseIP("192.168.0.5")}},
		{name: "docker0", up: true, ips: []net.IP{net.ParseIP("172.17.0.1")}},
		{name: "eth10", up: true, ips: []net.IP{net.ParseIP("10.0.10.5")}},
		{name: "bond0", up: true, ips: []net.IP{net.ParseIP("fe80::9")}},
	}
	tests := []struct {
		spec, wantName, wantIP string
	}{
		{"eth", "eth0", "10.0.0.5"},           // prefix; eth1 is down
		{"ib", "ib1", "192.168.0.5"},          // IPv4 preferred over ib0's IPv6
		{"=ib0", "ib0", "fd00::5"},            // exact: IPv6 when that is all it has
		{"=eth1,eth10", "eth10", "10.0.10.5"}, // eth1 is down
		{"eth1", "eth10", "10.0.10.5"},        // a prefix, like NCCL_SOCKET_IFNAME
		{"ib1,eth", "ib1", "192.168.0.5"},     // list order is preference order
		{"eth,ib1", "eth0", "10.0.0.5"},
		{"^eth,ib", "docker0", "172.17.0.1"}, // exclusion skips loopback while others remain
		{"^=eth0", "ib1", "192.168.0.5"},     // the IPv4 of a later interface beats ib0's IPv6
		{"^eth,ib,docker,bond", "lo", "127.0.0.1"},
		{" lo ", "lo", "127.0.0.1"},
	}
	for _, tc := range tests {
		ip, name, err := chooseByName(ifaces, tc.spec)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if name != tc.wantName || !ip.Equal(net.ParseIP(tc.wantIP)) {
			t.Errorf("%q: got %v on %s, want %s on %s", tc.spec, ip, name, tc.wantIP, tc.wantName)
		}
	}
	for _, spec := range []string{"=eth1", "=eth", "bond", "wlan", "^lo,eth,ib,docker,bond", "^", ""} {
		if ip, name, err := chooseByName(ifaces, spec); err == nil {
			t.Errorf("%q: got %v on %s, want an error", spec, ip, name)
		}
	}
	_, _, err := chooseByName(ifaces, "wlan")
	if err == nil || !strings.Contains(err.Error(), "eth1 (down) [10.0.1.5]") || !strings.Contains(err.Error(), "bond0 [fe80::9]") {
		t.Errorf("error should list the interfaces with state and addresses: %v", err)
	}
}
