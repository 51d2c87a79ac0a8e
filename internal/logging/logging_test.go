package logging

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines collects what a logger writes.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (c *lines) sink(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, line)
}

func (c *lines) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func TestParseLevel(t *testing.T) {
	for s, want := range map[string]Level{"NONE": None, "version": Version, "Warn": Warn, "INFO": Info, "trace": Trace} {
		got, err := ParseLevel(s)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "debug", "on", "1", "WARNING"} {
		if _, err := ParseLevel(bad); err == nil || !strings.Contains(err.Error(), "TRACE") {
			t.Errorf("ParseLevel(%q): error %v, want one listing the levels", bad, err)
		}
	}
}

func TestParseSubsys(t *testing.T) {
	for s, want := range map[string]Subsys{
		"ALL":            All,
		"all":            All,
		"init":           Init,
		"INIT,NET":       Init | Net,
		" tcp , rdma ":   TCP | RDMA,
		"^tcp":           All &^ TCP,
		"^TCP,bootstrap": All &^ (TCP | Bootstrap),
		"^ALL":           0,
		"coll,env,Coll":  Coll | Env,
	} {
		got, err := ParseSubsys(s)
		if err != nil || got != want {
			t.Errorf("ParseSubsys(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "ALL,", "init,,net", "graph", "bootstrap,init,^", "^"} {
		if got, err := ParseSubsys(bad); err == nil {
			t.Errorf("ParseSubsys(%q) = %v, want an error", bad, got)
		}
	}
}

func TestSubsysString(t *testing.T) {
	if All.String() != "ALL" || (Init|TCP).String() != "init,tcp" {
		t.Errorf("got %q and %q", All.String(), (Init | TCP).String())
	}
	for _, n := range subsysNames {
		back, err := ParseSubsys(n.s.String())
		if err != nil || back != n.s {
			t.Errorf("%v does not parse back: %v, %v", n.s, back, err)
		}
	}
}

// Each level lets through its own lines and those of the levels below;
// info and trace lines only of the subsystems in the mask, warnings and
// the start-up line of every subsystem.
func TestLevelsAndSubsystems(t *testing.T) {
	emit := func(l *Logger) {
		l.Versionf("start-up")
		l.Warnf(TCP, "tcp warning")
		l.Infof(TCP, "tcp info")
		l.Infof(Init, "init info")
		l.Tracef(Coll, "coll trace")
		l.Tracef(Init, "init trace")
	}
	tests := []struct {
		level Level
		mask  Subsys
		want  []string
	}{
		{None, All, nil},
		{Version, All, []string{"start-up"}},
		{Warn, All, []string{"start-up", "WARN tcp: tcp warning"}},
		{Warn, Init, []string{"start-up", "WARN tcp: tcp warning"}},
		{Info, All, []string{"start-up", "WARN tcp: tcp warning", "INFO tcp: tcp info", "INFO init: init info"}},
		{Info, Init, []string{"start-up", "WARN tcp: tcp warning", "INFO init: init info"}},
		{Info, All &^ Init, []string{"start-up", "WARN tcp: tcp warning", "INFO tcp: tcp info"}},
		{Trace, All, []string{"start-up", "WARN tcp: tcp warning", "INFO tcp: tcp info", "INFO init: init info",
			"TRACE coll: coll trace", "TRACE init: init trace"}},
		{Trace, Coll, []string{"start-up", "WARN tcp: tcp warning", "TRACE coll: coll trace"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/%v", tc.level, tc.mask), func(t *testing.T) {
			var c lines
			emit(New(c.sink, tc.level, tc.mask).WithRank(3))
			got := c.all()
			if len(got) != len(tc.want) {
				t.Fatalf("got %d lines %q, want %d %q", len(got), got, len(tc.want), tc.want)
			}
			for i, line := range got {
				if !strings.HasSuffix(line, " sparcml "+tc.want[i]) {
					t.Errorf("line %d = %q, want it to end with %q", i, line, "sparcml "+tc.want[i])
				}
			}
		})
	}
}

// Every line starts with host, pid and rank.
func TestPrefix(t *testing.T) {
	var c lines
	l := New(c.sink, Info, All)
	l.Warnf(Net, "before the rank is known")
	l.WithRank(7).Infof(Net, "interface %s", "eth0")
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	pid := fmt.Sprint(os.Getpid())
	want := []string{
		host + ":" + pid + " sparcml WARN net: before the rank is known",
		host + ":" + pid + " [7] sparcml INFO net: interface eth0",
	}
	got := c.all()
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestNilLogger(t *testing.T) {
	var l *Logger
	if l.Enabled(Warn, All) || l.Level() != None || l.WithRank(1) != nil {
		t.Error("a nil logger must be disabled")
	}
	l.Versionf("x")
	l.Warnf(TCP, "x")
	l.Infof(TCP, "x")
	l.Tracef(TCP, "x")
	l.WarnLimited(&Limiter{}, TCP, "x")
}

func TestWriterSinkKeepsLinesWhole(t *testing.T) {
	var b strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return b.Write(p) })
	l := New(WriterSink(w), Info, All).WithRank(0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				l.Infof(Coll, "goroutine %d line %d", g, i)
			}
		}()
	}
	wg.Wait()
	re := regexp.MustCompile(`^\S+:\d+ \[0\] sparcml INFO coll: goroutine \d line \d+$`)
	out := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(out) != 800 {
		t.Fatalf("%d lines, want 800", len(out))
	}
	for _, line := range out {
		if !re.MatchString(line) {
			t.Fatalf("malformed line %q", line)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A limiter passes the first line, holds back the rest of the interval,
// and the next line it passes counts them.
func TestWarnLimited(t *testing.T) {
	var c lines
	l := New(c.sink, Warn, All)
	lim := &Limiter{Every: 200 * time.Millisecond}
	for i := 0; i < 50; i++ {
		l.WarnLimited(lim, TCP, "refused connection %d", i)
	}
	got := c.all()
	if len(got) != 1 || !strings.HasSuffix(got[0], "refused connection 0") {
		t.Fatalf("within one interval: %q, want the first line only", got)
	}
	time.Sleep(250 * time.Millisecond)
	l.WarnLimited(lim, TCP, "refused connection %d", 50)
	got = c.all()
	if len(got) != 2 || !strings.HasSuffix(got[1], "refused connection 50 (and 49 more like it since the last one shown)") {
		t.Fatalf("after the interval: %q", got)
	}
	// Disabled warnings do not consume the limiter.
	New(c.sink, Version, All).WarnLimited(lim, TCP, "hidden")
	if len(c.all()) != 2 {
		t.Error("a disabled warning was written")
	}
}

var sinkLine string

// A disabled trace line guarded by Enabled costs no allocation.
func TestDisabledTraceAllocatesNothing(t *testing.T) {
	l := New(func(s string) { sinkLine = s }, Info, All)
	n, seq := 1<<20, uint64(7)
	allocs := testing.AllocsPerRun(1000, func() {
		if l.Enabled(Trace, Coll) {
			l.Tracef(Coll, "allreduce seq %d: %d bytes", seq, n)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per disabled trace line", allocs)
	}
}

func BenchmarkDisabledTrace(b *testing.B) {
	l := New(func(s string) { sinkLine = s }, Warn, All)
	for i := 0; b.Loop(); i++ {
		if l.Enabled(Trace, Coll) {
			l.Tracef(Coll, "allreduce seq %d", i)
		}
	}
}

func BenchmarkEnabledTrace(b *testing.B) {
	l := New(func(s string) { sinkLine = s }, Trace, All).WithRank(0)
	for i := 0; b.Loop(); i++ {
		if l.Enabled(Trace, Coll) {
			l.Tracef(Coll, "allreduce seq %d", i)
		}
	}
}
