package main

import (
	"slices"
	"testing"
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
}
