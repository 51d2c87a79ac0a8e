package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runSimCmd runs `sparcml sim args` in process and returns its output.
func runSimCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	cfg, err := parseSimFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	out := newSimReporter(&b, cfg.format)
	if _, err := runSim(cfg, out.rows); err != nil {
		t.Fatal(err)
	}
	out.close()
	return b.Bytes()
}

// TestSimOutputIdentical: two runs print the same bytes, in every format
// (virtual time does not depend on the machine's load).
func TestSimOutputIdentical(t *testing.T) {
	for _, format := range []string{"table", "json", "csv"} {
		args := []string{"-n", "16,32", "--op", "sparse-allreduce", "--sizes", "32K", "--density", "0.01,0.1",
			"--dist", "powerlaw", "--algo", "all", "--check", "--topology", "fattree", "--ranks-per-host", "4",
			"--oversubscription", "2", "--format", format}
		a, b := runSimCmd(t, args...), runSimCmd(t, args...)
		if !bytes.Equal(a, b) {
			t.Errorf("--format %s: two runs differ:\n%s\n%s", format, a, b)
		}
		if bytes.Contains(a, []byte("FAIL")) {
			t.Errorf("--format %s: a wrong result:\n%s", format, a)
		}
	}
}

// TestSimCalibration: --calibration takes the network and kernels of a
// bench row's cost_model.
func TestSimCalibration(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.json")
	row := `{"op":"allreduce","cost_model":{"alpha_us":30,"beta_gbps":0.125,"gamma_gbps":2,"sparse_gamma_gbps":0.5,"index_codec_ns":4}}`
	if err := os.WriteFile(file, []byte("# a comment line\n"+row+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseSimFlags([]string{"--calibration", file})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }
	if !near(cfg.machine.Latency, 30e-6) || !near(cfg.machine.Rate, 0.125e9) || !near(cfg.model.Gamma, 1/2e9) || !near(cfg.model.Alpha, 30e-6) {
		t.Errorf("calibration not applied: latency %v rate %v gamma %v alpha %v", cfg.machine.Latency, cfg.machine.Rate,
			cfg.model.Gamma, cfg.model.Alpha)
	}
}

// TestSimPlot draws one line per algorithm.
func TestSimPlot(t *testing.T) {
	cfg, err := parseSimFlags([]string{"-n", "4:16", "--sizes", "4K", "--algo", "ring,recursive-doubling"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := runSim(cfg, func([]simResult) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	svg := string(plotSVG(rows))
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Errorf("%d lines, want 2", n)
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := writePlot(path, rows); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot p.png: %v", err)
	}
}

// TestSimCompress: --op compress runs both scopes, every result and
// residual checked against bench's reference, and reports K and the bound.
func TestSimCompress(t *testing.T) {
	out := string(runSimCmd(t, "-n", "6", "--op", "compress", "--sizes", "8K", "--check", "--format", "json"))
	for _, want := range []string{`"scope":"union"`, `"scope":"global"`, `"k":82`, `"bound_bytes_per_rank":3280`, `"check":"ok"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
}

// TestSimAlgoAllSkipsWhatDoesNotApply: --algo all runs on a flat topology
// without the hierarchical allreduce, which needs hosts, and with it on
// hosts; naming it on a flat topology is a usage error.
func TestSimAlgoAllSkipsWhatDoesNotApply(t *testing.T) {
	for _, c := range []struct {
		topology string
		want     bool
	}{{"flat", false}, {"hosts", true}} {
		out := string(runSimCmd(t, "-n", "8", "--sizes", "4K", "--algo", "all", "--check", "--topology", c.topology,
			"--ranks-per-host", "4", "--format", "csv"))
		if got := strings.Contains(out, "hierarchical"); got != c.want {
			t.Errorf("--topology %s: hierarchical in the output %v, want %v:\n%s", c.topology, got, c.want, out)
		}
		for _, algo := range []string{"ring", "rabenseifner", "recursive-doubling"} {
			if !strings.Contains(out, algo) {
				t.Errorf("--topology %s: no row of %s:\n%s", c.topology, algo, out)
			}
		}
		if strings.Contains(out, "FAIL") {
			t.Errorf("--topology %s: a wrong result:\n%s", c.topology, out)
		}
	}
	if _, err := parseSimFlags([]string{"--algo", "hierarchical", "--topology", "flat"}); err == nil {
		t.Error("--algo hierarchical on a flat topology was accepted")
	}
}

// TestSimCores: --cores shares the machine's cores among the ranks: 8
// ranks merging on 2 cores take longer than on a core each, the row says
// so, and a negative count is refused.
func TestSimCores(t *testing.T) {
	args := []string{"-n", "8", "--op", "sparse-allreduce", "--sizes", "256K", "--density", "0.05", "--algo", "ssar-rd", "--format", "json"}
	own, shared := runSimCmd(t, args...), runSimCmd(t, append(args, "--cores", "2")...)
	simUS := func(out []byte) float64 {
		var row struct {
			SimUS float64 `json:"sim_time_us"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &row); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return row.SimUS
	}
	if a, b := simUS(own), simUS(shared); !(b > a) {
		t.Errorf("8 ranks on 2 cores: %v us, on a core each %v us", b, a)
	}
	if !bytes.Contains(shared, []byte(`"cores":2`)) || bytes.Contains(own, []byte(`"cores"`)) {
		t.Errorf("cores field: %s / %s", own, shared)
	}
	if _, err := parseSimFlags([]string{"--cores", "-1"}); err == nil {
		t.Error("--cores -1 accepted")
	}
}
