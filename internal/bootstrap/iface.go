package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// ifaceInfo is what interface choice needs to know about one network
// interface; tests build it by hand.
type ifaceInfo struct {
	name     string
	up       bool
	loopback bool
	ips      []net.IP
}

// ChooseAddr picks the local address this rank listens on for data
// connections, and names its interface so the caller can log it.
//
// With ifname set (SPARCML_IFNAME) it uses NCCL_SOCKET_IFNAME's syntax: a
// comma-separated list of name prefixes ("ib,eth"), with a leading "^" to
// exclude instead ("^docker,lo") and a leading "=" for exact names
// ("=eth0"). The first matching interface that is up and has an IPv4
// address wins (else one with IPv6); earlier entries of the list are
// preferred.
//
// Without ifname: loopback when the rendezvous host is a loopback address;
// else the interface the kernel would route to the rendezvous host
// through; else the first up non-loopback interface with IPv4.
func ChooseAddr(ifname, rendezvous string) (ip net.IP, iface string, err error) {
	ifaces, err := systemInterfaces()
	if err != nil {
		return nil, "", err
	}
	if strings.TrimSpace(ifname) != "" {
		return chooseByName(ifaces, ifname)
	}
	host := rendezvous
	if h, _, err := net.SplitHostPort(rendezvous); err == nil {
		host = h
	}
	if isLoopbackHost(host) {
		if ip, name, ok := firstAddr(ifaces, func(i ifaceInfo) bool { return i.loopback }); ok {
			return ip, name, nil
		}
	}
	if rendezvous != "" {
		if local := routeSource(rendezvous); local != nil {
			if ip, name, ok := owner(ifaces, local); ok {
				return ip, name, nil
			}
		}
	}
	if ip, name, ok := firstAddr(ifaces, func(i ifaceInfo) bool { return !i.loopback }); ok && ip.To4() != nil {
		return ip, name, nil
	}
	if ip, name, ok := firstAddr(ifaces, func(i ifaceInfo) bool { return true }); ok {
		return ip, name, nil
	}
	return nil, "", fmt.Errorf("bootstrap: no network interface is up with an IP address (interfaces: %s)", describe(ifaces))
}

func systemInterfaces() ([]ifaceInfo, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listing network interfaces: %w", err)
	}
	out := make([]ifaceInfo, 0, len(list))
	for _, it := range list {
		info := ifaceInfo{name: it.Name, up: it.Flags&net.FlagUp != 0, loopback: it.Flags&net.FlagLoopback != 0}
		addrs, err := it.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				info.ips = append(info.ips, n.IP)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// isLoopbackHost reports whether host is a loopback literal or a name that
// resolves only to loopback addresses.
func isLoopbackHost(host string) bool {
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// routeSource returns the source address the kernel picks for packets to
// addr. Connecting a UDP socket only consults the routing table; no packet
// is sent.
func routeSource(addr string) net.IP {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.Dial("udp", addr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	if ua, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		return ua.IP
	}
	return nil
}

// owner finds the up interface that holds ip.
func owner(ifaces []ifaceInfo, ip net.IP) (net.IP, string, bool) {
	for _, it := range ifaces {
		if !it.up {
			continue
		}
		for _, a := range it.ips {
			if a.Equal(ip) {
				if v4 := ip.To4(); v4 != nil {
					ip = v4
				}
				return ip, it.name, true
			}
		}
	}
	return nil, "", false
}

// usableIP returns the interface's IPv4 address, else a global or loopback
// IPv6 one. Link-local IPv6 needs a zone that net.IP cannot carry.
func usableIP(it ifaceInfo) net.IP {
	for _, ip := range it.ips {
		if v4 := ip.To4(); v4 != nil && !v4.IsUnspecified() {
			return v4
		}
	}
	for _, ip := range it.ips {
		if ip.To4() == nil && (ip.IsGlobalUnicast() || ip.IsLoopback()) {
			return ip
		}
	}
	return nil
}

// firstAddr returns the first up interface accepted by keep that has a
// usable address, preferring IPv4 over IPv6 across interfaces.
func firstAddr(ifaces []ifaceInfo, keep func(ifaceInfo) bool) (net.IP, string, bool) {
	var v6 net.IP
	var v6name string
	for _, it := range ifaces {
		if !it.up || !keep(it) {
			continue
		}
		ip := usableIP(it)
		if ip == nil {
			continue
		}
		if ip.To4() != nil {
			return ip, it.name, true
		}
		if v6 == nil {
			v6, v6name = ip, it.name
		}
	}
	return v6, v6name, v6 != nil
}

// CheckInterfaceList checks the syntax of an interface list as ChooseAddr
// takes it (SPARCML_IFNAME), without looking at the interfaces.
func CheckInterfaceList(spec string) error {
	_, err := parseIfSpec(spec)
	return err
}

// ifSpec is a parsed NCCL_SOCKET_IFNAME-style interface list.
type ifSpec struct {
	exclude bool
	exact   bool
	names   []string
}

func parseIfSpec(s string) (ifSpec, error) {
	var sp ifSpec
	s = strings.TrimSpace(s)
	for len(s) > 0 && (s[0] == '^' || s[0] == '=') {
		if s[0] == '^' {
			sp.exclude = true
		} else {
			sp.exact = true
		}
		s = s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			if strings.ContainsAny(n, " \t") {
				return sp, fmt.Errorf("interface name %q contains a space (separate names with commas)", n)
			}
			sp.names = append(sp.names, n)
		}
	}
	if len(sp.names) == 0 {
		return sp, errors.New("no interface names")
	}
	return sp, nil
}

func (sp ifSpec) matchesEntry(name, entry string) bool {
	if sp.exact {
		return name == entry
	}
	return strings.HasPrefix(name, entry)
}

func (sp ifSpec) matchesAny(name string) bool {
	for _, e := range sp.names {
		if sp.matchesEntry(name, e) {
			return true
		}
	}
	return false
}

// chooseByName applies an interface list. Included entries are tried in
// the order given; with "^", interfaces are tried in system order and
// loopback only when nothing else is left.
func chooseByName(ifaces []ifaceInfo, spec string) (net.IP, string, error) {
	sp, err := parseIfSpec(spec)
	if err != nil {
		return nil, "", fmt.Errorf("bootstrap: interface list %q (SPARCML_IFNAME): %v", spec, err)
	}
	if sp.exclude {
		keep := func(it ifaceInfo) bool { return !sp.matchesAny(it.name) && !it.loopback }
		if ip, name, ok := firstAddr(ifaces, keep); ok {
			return ip, name, nil
		}
		keep = func(it ifaceInfo) bool { return !sp.matchesAny(it.name) }
		if ip, name, ok := firstAddr(ifaces, keep); ok {
			return ip, name, nil
		}
	} else {
		for _, entry := range sp.names {
			keep := func(it ifaceInfo) bool { return sp.matchesEntry(it.name, entry) }
			if ip, name, ok := firstAddr(ifaces, keep); ok {
				return ip, name, nil
			}
		}
	}
	return nil, "", fmt.Errorf("bootstrap: interface list %q (SPARCML_IFNAME) matches no interface that is up and has an IP address; available: %s",
		spec, describe(ifaces))
}

// describe lists interfaces with their state and addresses for errors.
func describe(ifaces []ifaceInfo) string {
	if len(ifaces) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ifaces))
	for _, it := range ifaces {
		var ips []string
		for _, ip := range it.ips {
			ips = append(ips, ip.String())
		}
		s := it.name
		if !it.up {
			s += " (down)"
		}
		if len(ips) > 0 {
			s += " [" + strings.Join(ips, " ") + "]"
		} else {
			s += " [no address]"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
