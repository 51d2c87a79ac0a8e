// Package procwatch looks at other processes through Linux's /proc, for the
// tests and the kill soak that must hit a rank at a given point of its
// start-up and check what a job left behind.
package procwatch

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// socketInodes lists the inodes of pid's open sockets.
func socketInodes(pid int) map[string]bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	inodes := make(map[string]bool)
	for _, e := range ents {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	return inodes
}

// ConnectedTo reports whether pid holds an established TCP connection to
// port (as rank 0's rendezvous store is), in its network namespace.
func ConnectedTo(pid, port int) bool {
	return tcpSocket(pid, "01", func(_, remote int) bool { return remote == port })
}

// ListensTCP reports whether pid listens on a TCP port other than
// except (the TCP transport's listener, for one).
func ListensTCP(pid, except int) bool {
	return tcpSocket(pid, "0A", func(local, _ int) bool { return local != except })
}

// tcpSocket reports whether pid holds a TCP socket in state (as
// /proc/net/tcp writes it) whose ports satisfy match.
func tcpSocket(pid int, state string, match func(local, remote int) bool) bool {
	inodes := socketInodes(pid)
	if len(inodes) == 0 {
		return false
	}
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != state || !inodes[fs[9]] {
				continue
			}
			if match(port(fs[1]), port(fs[2])) {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

// port reads the port of an address of /proc/net/tcp (hex ip:port).
func port(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(p)
}

// ListensOn reports whether pid holds a unix socket whose name contains
// sub (the shared-memory transport's abstract socket, for one).
func ListensOn(pid int, sub string) bool {
	inodes := socketInodes(pid)
	if len(inodes) == 0 {
		return false
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fs := strings.Fields(sc.Text())
		if len(fs) >= 8 && inodes[fs[6]] && strings.Contains(fs[7], sub) {
			return true
		}
	}
	return false
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Children lists the live processes whose parent is pid.
func Children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		fs := strings.Fields(s[i+1:])
		if len(fs) > 1 && fs[1] == strconv.Itoa(pid) && fs[0] != "Z" {
			kids = append(kids, child)
		}
	}
	return kids
}
