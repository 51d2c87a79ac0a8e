package main

import (
	"flag"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/version"
)

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int{
		"1K:8K":     {1024, 2048, 4096, 8192},
		"0:4":       {0, 1, 2, 4},
		"0,1,17,2M": {0, 1, 17, 2 << 20},
		"16M":       {16 << 20},
	} {
		got, err := parseSizes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "8K:1K", "-1", "1Q"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}

func TestParseDensities(t *testing.T) {
	got, err := parseDensities("0.01,10%,1")
	if err != nil || !slices.Equal(got, []float64{0.01, 0.1, 1}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"2", "-0.1", "abc", "NaN"} {
		if _, err := parseDensities(bad); err == nil {
			t.Errorf("parseDensities(%q) accepted", bad)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--op", "allreduse"}, {"--algo", "fastest"}, {"--dtype", "int8"}, {"--format", "xml"},
		{"--transport", "carrier-pigeon"}, {"--quant", "q3"}, {"--iters", "0"}, {"--dist", "normal"},
		{"--inflight", "2", "--op", "broadcast"}, {"--quant", "q4", "--op", "broadcast"}, {"stray"},
		{"--window", "0", "--op", "p2p"}, {"--window", "4", "--op", "allreduce"},
		{"--algo", "ring,auto"}, {"--op", "sparse-allreduce", "--algo", "dsar,dsar"}, {"--op", "sparse-allreduce", "--algo", "dsar,"},
		{"--algo", "auto-tensor"}, {"--op", "sparse-allgather", "--algo", "auto-tensor"},
		{"--cpuprofile", "/nonexistent-dir/cpu"}, {"--memprofile", "/nonexistent-dir/mem"}, {"--trace", "/nonexistent-dir/t"},
		{"--progress=maybe"},
		{"--scope", "global"}, {"--select", "sampled", "--op", "sparse-allreduce"}, {"--op", "compress", "--scope", "local"},
		{"--op", "compress", "--scope", "global,global"}, {"--op", "compress", "--select", "best"},
		{"--op", "compress", "--check", "--quant", "q4"}, {"--op", "compress", "--redop", "sum"},
		{"--op", "compress", "--global-period", "-1"},
	} {
		if _, err := parseBenchFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
	cfg, err := parseBenchFlags([]string{"--op", "sparse-allreduce", "--algo", "dsar", "--density", "0.5", "--quant", "q4"})
	if err != nil || cfg.op != "sparse-allreduce" || cfg.densities[0] != 0.5 {
		t.Fatalf("valid flags rejected: %v", err)
	}
	cfg, err = parseBenchFlags([]string{"--op", "sparse-allreduce", "--algo", "dsar, auto,auto-tensor"})
	if err != nil || !slices.Equal(cfg.algoNames, []string{"dsar", "auto", "auto-tensor"}) || cfg.algoName != "dsar" ||
		!slices.Equal(cfg.algos, []sparcml.Algo{sparcml.AlgoDSAR, sparcml.AlgoAuto, sparcml.AlgoAuto}) {
		t.Fatalf("--algo list: %+v, %v", cfg, err)
	}
}

// --progress is on or off when given (alone: on), else unset; the
// profile flags keep their prefix.
func TestBenchProgressAndProfileFlags(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		set, on  bool
		cpu, tra string
	}{
		{args: nil},
		{args: []string{"--progress"}, set: true, on: true},
		{args: []string{"--progress=false"}, set: true},
		{args: []string{"--progress=0", "--progress=true"}, set: true, on: true},
		{args: []string{"--cpuprofile", "/tmp/cpu", "--trace", "/tmp/t"}, cpu: "/tmp/cpu", tra: "/tmp/t"},
	} {
		cfg, err := parseBenchFlags(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if cfg.progress.set != tc.set || cfg.progress.on != tc.on || cfg.cpuProfile != tc.cpu || cfg.execTrace != tc.tra {
			t.Errorf("%v: progress %+v, cpuprofile %q, trace %q", tc.args, cfg.progress, cfg.cpuProfile, cfg.execTrace)
		}
	}
}

func TestParseCompressFlags(t *testing.T) {
	cfg, err := parseBenchFlags([]string{"--op", "compress", "--scope", "global, union", "--select", "reuse", "--global-period", "4"})
	if err != nil || !slices.Equal(cfg.scopes, []compress.Scope{compress.ScopeGlobal, compress.ScopeUnion}) ||
		cfg.selectMethod != compress.Reuse || cfg.globalPeriod != 4 || cfg.redop != sparcml.Avg {
		t.Fatalf("--op compress flags: %+v, %v", cfg, err)
	}
	if cfg, err = parseBenchFlags([]string{"--op", "compress"}); err != nil || len(cfg.scopes) != 2 {
		t.Fatalf("--op compress defaults: %+v, %v", cfg, err)
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{[]string{"--bytes", "8:128"}, []int{2, 4, 8, 16, 32}},
		{[]string{"--bytes", "8:64", "--dtype", "float64"}, []int{1, 2, 4, 8}},
		{[]string{"--bytes", "0,4K,1M"}, []int{0, 1024, 256 << 10}},
		{[]string{"--bytes", "128M"}, []int{32 << 20}},
		{[]string{"--sizes", "1K"}, []int{1024}},
		{nil, nil}, // the default --sizes
	} {
		cfg, err := parseBenchFlags(tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if tc.want != nil && !slices.Equal(cfg.sizes, tc.want) {
			t.Errorf("%v: sizes %v, want %v", tc.args, cfg.sizes, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--bytes", "6"},                       // not a whole number of float32s
		{"--bytes", "4", "--dtype", "float64"}, // nor of float64s
		{"--bytes", "8", "--sizes", "2"},       // both
		{"--bytes", "1Q"}, {"--bytes", "64:8"},
	} {
		if _, err := parseBenchFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}

func TestParseRedopAndRoot(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redop", "avg"}, "avg"},
		{[]string{"--redop", "max", "--op", "reduce-scatter"}, "max"},
		{[]string{"--reduce", "min"}, "min"}, // the old spelling
		{[]string{"--op", "sparse-allreduce", "--redop", "avg"}, "avg"},
		{[]string{"--redop", "avg", "--quant", "q4"}, "avg"},
	} {
		cfg, err := parseBenchFlags(tc.args)
		if err != nil || cfg.redop.String() != tc.want {
			t.Errorf("%v: %v, %v", tc.args, cfg, err)
		}
	}
	for _, args := range [][]string{
		{"--redop", "prod"}, {"--redop", "sum", "--op", "broadcast"},
		{"--op", "sparse-allreduce", "--redop", "max"}, {"--redop", "min", "--quant", "fp16"},
		{"--root", "1", "--op", "allreduce"},
	} {
		if _, err := parseBenchFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	cfg, err := parseBenchFlags([]string{"--op", "broadcast", "--root", "2"})
	if err != nil || cfg.root != 2 {
		t.Fatalf("--root 2: %v, %v", cfg, err)
	}
}

// TestHelpListsFlags: -h is not an error, and every visible flag is
// listed by it and by the top-level usage; the hidden ones are not.
func TestHelpListsFlags(t *testing.T) {
	if _, err := parseBenchFlags([]string{"-h"}); err != errHelp {
		t.Fatalf("bench -h: %v", err)
	}
	var b strings.Builder
	fs := newBenchFlags(&benchConfig{}, &benchFlagValues{})
	printFlags(&b, fs, hiddenBenchFlags)
	top := usage()
	fs.VisitAll(func(f *flag.Flag) {
		listed := strings.Contains(b.String(), dashed(f.Name)+" ") || strings.Contains(b.String(), dashed(f.Name)+"\n")
		hidden := slices.Contains(hiddenBenchFlags, f.Name)
		if listed == hidden {
			t.Errorf("bench -h: flag %s listed=%v hidden=%v", f.Name, listed, hidden)
		}
		if !hidden && !strings.Contains(top, dashed(f.Name)) {
			t.Errorf("top-level usage does not list bench's %s", dashed(f.Name))
		}
	})
	newRunFlags(&runFlags{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(top, dashed(f.Name)) {
			t.Errorf("top-level usage does not list run's %s", dashed(f.Name))
		}
	})
}

func TestVersionOutput(t *testing.T) {
	var b strings.Builder
	if err := versionCmd(&b, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"sparcml " + version.String(), "module:  github.com/sparcml/sparcml", "commit:  ", "go:      " + runtime.Version(), "rdma:    " + rdmaSupport} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	if err := versionCmd(&b, []string{"extra"}); err == nil {
		t.Error("version accepted an argument")
	}
	info := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2000-01-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	if got := commitOf(info); got != "abc123 (2000-01-01T00:00:00Z) with uncommitted changes" {
		t.Errorf("commitOf: %q", got)
	}
}

func TestJSONRounding(t *testing.T) {
	r := result{TimeMin: 12.3456, TimeMedian: 1234.5678, AlgBW: 0.000123456, BusBW: 12.34567, SpeedupVsDense: 2.71828}
	got := r.rounded()
	if got.TimeMin != 12.35 || got.TimeMedian != 1234.57 || got.AlgBW != 0.0001235 || got.BusBW != 12.35 || got.SpeedupVsDense != 2.718 {
		t.Errorf("rounded: %+v", got)
	}
}

// A row JSON cannot encode fails the run instead of vanishing from the
// output while the run exits 0.
func TestJSONRowThatCannotEncodeIsAnError(t *testing.T) {
	var out strings.Builder
	rep := newReporter(&out, "json", true)
	if err := rep.row(result{Op: "sparse-allreduce", Algo: "auto", N: 16, PredictedUS: 5}); err != nil {
		t.Fatalf("finite row: %v", err)
	}
	err := rep.row(result{Op: "sparse-allreduce", Algo: "hierarchical", N: 16, PredictedUS: math.Inf(1)})
	if err == nil || !strings.Contains(err.Error(), "hierarchical") {
		t.Fatalf("row with an infinite prediction: err = %v", err)
	}
	if lines := strings.Count(out.String(), "\n"); lines != 1 {
		t.Errorf("%d lines written, want the finite row's alone:\n%s", lines, out.String())
	}
}

func TestCountWrong(t *testing.T) {
	want := []float32{1, 2, 3, 4}
	got := slices.Clone(want)
	if n := countWrong(got, want, 0, 0); n != 0 {
		t.Errorf("equal: %d wrong", n)
	}
	if n := countWrong(got, want, 0, 2); n != 2 {
		t.Errorf("two injected: %d wrong", n)
	}
	if n := countWrong([]float32{1.2, 2, 3, 4}, want, 0.25, 0); n != 0 {
		t.Errorf("within tolerance: %d wrong", n)
	}
	if n := countWrong([]float32{1}, want, 0, 0); n != 4 {
		t.Errorf("short: %d wrong", n)
	}
}
