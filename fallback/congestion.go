package fallback

import (
	"net"
	"strings"
)

// paces reports whether a congestion control algorithm paces its sends:
// the BBR family does (see Config.Congestion).
func paces(algo string) bool { return strings.HasPrefix(algo, "bbr") }

// namesAlgorithm reports whether policy (Config.Congestion) names an
// algorithm rather than auto or system.
func namesAlgorithm(policy string) bool {
	return policy != CongestionAuto && policy != CongestionSystem
}

// congestionChoices returns the algorithms to try on a connection, in
// order, under policy (Config.Congestion), given the kernel's current
// choice and whether both ends are on this host; none means keep the
// current one. strict means the policy asked for them by name, so failing
// to set them is an error rather than a reason to keep the current one.
func congestionChoices(policy, current string, sameHost bool) (try []string, strict bool) {
	switch {
	case namesAlgorithm(policy) && policy != current:
		return []string{policy}, true
	case namesAlgorithm(policy):
		return nil, true
	case policy == CongestionAuto && sameHost && paces(current):
		return []string{"cubic", "reno"}, false
	default:
		return nil, false
	}
}

// sameHost reports whether a connection's two ends are addresses of this
// host: a loopback peer, or the peer at our own address.
func sameHost(local, remote net.Addr) bool {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	return ok1 && ok2 && (r.IP.IsLoopback() || r.IP.Equal(l.IP))
}

// validCongestion checks a policy's syntax: an algorithm name is at most
// 15 bytes (the kernel's TCP_CA_NAME_MAX) of letters, digits, '_' and '-'.
func validCongestion(policy string) bool {
	if policy == "" || len(policy) > 15 {
		return false
	}
	for _, c := range policy {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
