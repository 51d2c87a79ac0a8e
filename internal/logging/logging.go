// Package logging is sparcml's levelled logger: the levels and subsystems
// of SPARCML_DEBUG and SPARCML_DEBUG_SUBSYS, modelled on NCCL_DEBUG and
// NCCL_DEBUG_SUBSYS, and one line format, "host:pid [rank] sparcml LEVEL
// subsystem: message".
//
// A nil *Logger is valid and logs nothing, so packages can take one as an
// optional configuration field. Asking whether a level is enabled is one
// comparison; callers on a hot path guard the call with Enabled so that a
// disabled line costs no formatting and no allocation:
//
//	if log.Enabled(logging.Trace, logging.Coll) {
//		log.Tracef(logging.Coll, "%s seq %d", kind, seq)
//	}
package logging

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Level is how much is logged. Each level includes the ones below it.
type Level int32

// Levels, as NCCL_DEBUG's.
const (
	// None logs nothing.
	None Level = iota
	// Version logs the start-up line only (rank 0: version, job size,
	// transport).
	Version
	// Warn adds warnings: something is wrong or degraded (a peer lost, a
	// connection refused, a token that is not secret). The default.
	Warn
	// Info adds the decisions taken at start-up (transport, interface,
	// cost model, congestion control, the variables that were set).
	Info
	// Trace adds one line per operation.
	Trace
)

var levelNames = [...]string{None: "NONE", Version: "VERSION", Warn: "WARN", Info: "INFO", Trace: "TRACE"}

func (l Level) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "Level(" + strconv.Itoa(int(l)) + ")"
}

// ParseLevel reads a level name, in any case: NONE, VERSION, WARN, INFO or
// TRACE.
func ParseLevel(s string) (Level, error) {
	for l, name := range levelNames {
		if strings.EqualFold(s, name) {
			return Level(l), nil
		}
	}
	return None, fmt.Errorf("unknown level %q (want %s)", s, strings.Join(levelNames[:], ", "))
}

// Subsys is a set of subsystems; each line belongs to one.
type Subsys uint32

// Subsystems.
const (
	// Init: Init's steps and decisions (one-rank jobs, the transport
	// chosen, the cost model, the start-up line).
	Init Subsys = 1 << iota
	// Env: the SPARCML_* variables that were set.
	Env
	// Bootstrap: the rendezvous store (listening, dialling, refused
	// connections, ranks that left without a goodbye).
	Bootstrap
	// Net: the network interface chosen.
	Net
	// TCP: the TCP transport (congestion control, refused connections,
	// lost peers).
	TCP
	// RDMA: the RDMA transport (device, port, GID, MTU, lost peers).
	RDMA
	// Coll: collective operations (one line per operation at Trace).
	Coll

	// All is every subsystem.
	All = Init | Env | Bootstrap | Net | TCP | RDMA | Coll
)

var subsysNames = []struct {
	s    Subsys
	name string
}{
	{Init, "init"}, {Env, "env"}, {Bootstrap, "bootstrap"}, {Net, "net"},
	{TCP, "tcp"}, {RDMA, "rdma"}, {Coll, "coll"},
}

// String names the subsystems of s, comma-separated ("ALL" for all).
func (s Subsys) String() string {
	if s == All {
		return "ALL"
	}
	var names []string
	for _, n := range subsysNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ParseSubsys reads NCCL_DEBUG_SUBSYS's syntax: a comma-separated list of
// subsystem names in any case, ALL for all of them, and a leading "^" to
// mean every subsystem except those listed ("^tcp,bootstrap").
func ParseSubsys(s string) (Subsys, error) {
	list, invert := strings.CutPrefix(strings.TrimSpace(s), "^")
	var set Subsys
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if strings.EqualFold(f, "ALL") {
			set |= All
			continue
		}
		found := false
		for _, n := range subsysNames {
			if strings.EqualFold(f, n.name) {
				set |= n.s
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown subsystem %q (want a comma-separated list of %s or ALL, optionally after ^)", f, All)
		}
	}
	if invert {
		set = All &^ set
	}
	return set, nil
}

// name is the name of a single subsystem.
func (s Subsys) name() string {
	for _, n := range subsysNames {
		if n.s == s {
			return n.name
		}
	}
	return s.String()
}

// Sink receives every line a Logger lets through, without a trailing
// newline. It must be safe for concurrent use.
type Sink func(line string)

// Stderr is the default sink: one write to standard error per line.
func Stderr() Sink { return WriterSink(os.Stderr) }

// WriterSink writes each line, with a newline, to w in one Write call,
// serialised so that lines of concurrent callers never interleave.
func WriterSink(w io.Writer) Sink {
	var mu sync.Mutex
	return func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(w, line+"\n")
	}
}

// PrintfSink hands each line to printf as printf("%s", line): for
// log.Printf, testing.T.Logf and the like.
func PrintfSink(printf func(format string, args ...any)) Sink {
	return func(line string) { printf("%s", line) }
}

// Logger writes the lines of the levels and subsystems it was made for to
// its sink, each prefixed with host, pid and (once known) rank. It is safe
// for concurrent use; a nil *Logger logs nothing.
type Logger struct {
	level  Level
	mask   Subsys
	sink   Sink
	host   string
	pid    int
	prefix string // "host:pid [rank] sparcml "
}

// New returns a logger that passes lines of level and below to sink:
// warnings and the start-up line of every subsystem, info and trace lines
// only of the subsystems in mask (as NCCL does). A nil sink means Stderr.
func New(sink Sink, level Level, mask Subsys) *Logger {
	if sink == nil {
		sink = Stderr()
	}
	host, _ := os.Hostname()
	if i := strings.IndexByte(host, '.'); i > 0 {
		host = host[:i]
	}
	l := &Logger{level: level, mask: mask, sink: sink, host: host, pid: os.Getpid()}
	l.prefix = fmt.Sprintf("%s:%d sparcml ", l.host, l.pid)
	return l
}

// ToPrintf is a logger of every level and subsystem writing to printf,
// for tests and for programs that route the library's lines themselves.
func ToPrintf(printf func(format string, args ...any)) *Logger {
	return New(PrintfSink(printf), Trace, All)
}

// WithRank returns a copy of l whose lines name rank. A nil l stays nil.
func (l *Logger) WithRank(rank int) *Logger {
	if l == nil {
		return nil
	}
	c := *l
	c.prefix = fmt.Sprintf("%s:%d [%d] sparcml ", l.host, l.pid, rank)
	return &c
}

// Level is the most detailed level l lets through (None for a nil l).
func (l *Logger) Level() Level {
	if l == nil {
		return None
	}
	return l.level
}

// Enabled reports whether a line of level in subsystem s would be
// written: false for a nil logger.
func (l *Logger) Enabled(level Level, s Subsys) bool {
	if l == nil || level > l.level || level == None {
		return false
	}
	return level <= Warn || l.mask&s != 0
}

// Versionf writes the start-up line, shown at every level but None.
func (l *Logger) Versionf(format string, args ...any) {
	if l.Enabled(Version, Init) {
		l.write(Version, Init, format, args)
	}
}

// Warnf writes a warning of subsystem s.
func (l *Logger) Warnf(s Subsys, format string, args ...any) {
	if l.Enabled(Warn, s) {
		l.write(Warn, s, format, args)
	}
}

// Infof writes an informational line of subsystem s.
func (l *Logger) Infof(s Subsys, format string, args ...any) {
	if l.Enabled(Info, s) {
		l.write(Info, s, format, args)
	}
}

// Tracef writes a trace line of subsystem s. On a hot path guard it with
// Enabled(Trace, s): the arguments are built before Tracef can decide.
func (l *Logger) Tracef(s Subsys, format string, args ...any) {
	if l.Enabled(Trace, s) {
		l.write(Trace, s, format, args)
	}
}

// Logf writes a line of the given level; Warnf, Infof and Tracef are the
// usual spellings.
func (l *Logger) Logf(level Level, s Subsys, format string, args ...any) {
	if l.Enabled(level, s) {
		l.write(level, s, format, args)
	}
}

func (l *Logger) write(level Level, s Subsys, format string, args []any) {
	var b strings.Builder
	b.WriteString(l.prefix)
	if level != Version {
		b.WriteString(level.String())
		b.WriteByte(' ')
		b.WriteString(s.name())
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, format, args...)
	l.sink(strings.TrimRight(b.String(), "\n"))
}
