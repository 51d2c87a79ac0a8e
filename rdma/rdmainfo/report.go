package rdmainfo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// NoDevicesMessage is what Report prints for an empty device list.
const NoDevicesMessage = "no RDMA devices found (is rdma_rxe / a driver loaded?)"

// Report writes a readable description of ds to w: one block per device
// with its ports, GID tables and the non-zero counters.
func Report(w io.Writer, ds []Device) error {
	ew := &errWriter{w: w}
	if len(ds) == 0 {
		ew.printf("%s\n", NoDevicesMessage)
		return ew.err
	}
	for i, d := range ds {
		if i > 0 {
			ew.printf("\n")
		}
		reportDevice(ew, d)
	}
	return ew.err
}

func reportDevice(w *errWriter, d Device) {
	w.printf("%s\n", d.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s:\t%s\n", k, v)
		}
	}
	field("node GUID", d.NodeGUID)
	field("node type", d.NodeType)
	field("driver", d.Driver)
	field("firmware", d.FirmwareVer)
	field("HCA type", d.HCAType)
	field("board ID", d.BoardID)
	field("netdevs", orNone(strings.Join(d.Netdevs, ", ")))
	field("char devices", strings.Join(d.CharDevices, " "))
	if err := tw.Flush(); err != nil {
		w.setErr(err)
	}
	if len(d.Ports) == 0 {
		w.printf("  no ports\n")
	}
	for _, p := range d.Ports {
		reportPort(w, p)
	}
}

func reportPort(w *errWriter, p Port) {
	line := fmt.Sprintf("  port %d: %s", p.Number, orUnknown(p.State))
	if p.PhysState != "" {
		line += " (" + p.PhysState + ")"
	}
	if p.LinkLayer != "" {
		line += ", " + p.LinkLayer
	}
	if p.Rate != "" {
		line += ", " + p.Rate
	}
	if p.LinkLayer == "InfiniBand" {
		line += fmt.Sprintf(", LID 0x%x, SM LID 0x%x", p.LID, p.SMLID)
	}
	w.printf("%s\n", line)

	if len(p.GIDs) == 0 {
		w.printf("    no GIDs\n")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "    GID\taddress\ttype\tnetdev\n")
		for _, g := range p.GIDs {
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\n", g.Index, g.IP, orDash(g.Type), orDash(g.Netdev))
		}
		if err := tw.Flush(); err != nil {
			w.setErr(err)
		}
	}
	if s := trafficSummary(p.Counters); s != "" {
		w.printf("    traffic: %s\n", s)
	}
	if s := nonZero(p.Counters, trafficCounters); s != "" {
		w.printf("    counters: %s\n", s)
	}
	if s := nonZero(p.HWCounters, nil); s != "" {
		w.printf("    hw counters: %s\n", s)
	}
}

var trafficCounters = map[string]bool{
	CounterXmitData: true, CounterRcvData: true,
	CounterXmitPackets: true, CounterRcvPackets: true,
}

// trafficSummary renders the standard data/packet counters; data counters
// count 4-byte words.
func trafficSummary(c map[string]uint64) string {
	var parts []string
	if v, ok := c[CounterXmitData]; ok {
		parts = append(parts, "sent "+bytesString(4*v))
		if n, ok := c[CounterXmitPackets]; ok {
			parts[len(parts)-1] += fmt.Sprintf(" in %d packets", n)
		}
	}
	if v, ok := c[CounterRcvData]; ok {
		parts = append(parts, "received "+bytesString(4*v))
		if n, ok := c[CounterRcvPackets]; ok {
			parts[len(parts)-1] += fmt.Sprintf(" in %d packets", n)
		}
	}
	return strings.Join(parts, ", ")
}

// nonZero renders the counters that are not zero, by name, skipping skip.
func nonZero(c map[string]uint64, skip map[string]bool) string {
	var keys []string
	for k, v := range c {
		if v != 0 && !skip[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}

func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown state"
	}
	return s
}

// errWriter keeps the first write error so Report can return it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.setErr(err)
	return n, err
}

func (e *errWriter) setErr(err error) {
	if e.err == nil && err != nil {
		e.err = err
	}
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
