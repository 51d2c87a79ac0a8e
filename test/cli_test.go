package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchJSON runs `sparcml bench ARGS --format json` and returns its rows.
func benchJSON(t *testing.T, args ...string) (rows []map[string]any, stderr string, err error) {
	t.Helper()
	out, errOut, err := runCmd(t, 3*time.Minute, nil, sparcmlBin, append(append([]string{"bench"}, args...), "--format", "json")...)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var row map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		rows = append(rows, row)
	}
	return rows, errOut, err
}

// --check checks in every mode: overlapped allreduces (--inflight) and
// the dense rows of --vs-dense report ok and no wrong element, with Avg
// and every op's redop and root columns.
func TestBenchCheckEveryMode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		rows  int
		redop string
		root  float64
	}{
		{"inflight", []string{"-n", "3", "--op", "allreduce", "--inflight", "3", "--sizes", "1000,33K", "--compute", "200", "--redop", "avg"}, 2, "avg", -1},
		{"vs-dense", []string{"-n", "3", "--op", "sparse-allreduce", "--sizes", "50K", "--density", "0.01,0.3", "--vs-dense"}, 4, "sum", -1},
		{"vs-dense-avg-q8", []string{"-n", "4", "--op", "sparse-allreduce", "--sizes", "20K", "--density", "0.05", "--vs-dense", "--redop", "avg", "--quant", "q8"}, 2, "avg", -1},
		{"broadcast-root", []string{"-n", "3", "--op", "broadcast", "--root", "2", "--bytes", "0,4K"}, 2, "none", 2},
		{"reduce-scatter-avg", []string{"-n", "5", "--op", "reduce-scatter", "--redop", "avg", "--bytes", "8:1K"}, 8, "avg", -1},
		{"p2p-baseline", []string{"-n", "2", "--op", "p2p", "--baseline", "--window", "3", "--sizes", "1K"}, 2, "none", -1},
		{"sparse-allgather", []string{"-n", "3", "--op", "sparse-allgather", "--sizes", "10K"}, 1, "none", -1},
		// Six algorithms taking turns (auto-tensor reusing its first
		// call's decision), and the dense row, per density.
		{"algo-list", []string{"-n", "4", "--op", "sparse-allreduce", "--sizes", "50K", "--density", "0.01,0.2", "--vs-dense",
			"--algo", "ssar-rd,ssar-split,dsar,allgather,auto,auto-tensor"}, 14, "sum", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, errOut, err := benchJSON(t, append(tc.args, "--iters", "3", "--warmup", "1", "--check")...)
			require.NoError(t, err, "stderr:\n%s", errOut)
			require.Len(t, rows, tc.rows)
			for _, row := range rows {
				for _, f := range jsonFields {
					assert.Contains(t, row, f)
				}
				assert.Equal(t, "ok", row["check"], "%v", row)
				assert.Equal(t, 0.0, row["wrong"], "%v", row)
				assert.Equal(t, tc.redop, row["redop"], "%v", row)
				assert.Equal(t, tc.root, row["root"], "%v", row)
				assert.NotEqual(t, "auto", row["algo_chosen"], "%v", row)
				assert.LessOrEqual(t, row["time_us_min"], row["time_us_avg"])
				assert.LessOrEqual(t, row["time_us_avg"], row["time_us_max"])
			}
			if tc.name == "algo-list" { // one row per algorithm, in the list's order, then the dense row
				for i, a := range []string{"ssar-rd", "ssar-split", "dsar", "allgather", "auto", "auto-tensor", "auto"} {
					assert.Equal(t, a, rows[i]["algo"], "row %d", i)
				}
			}
		})
	}
}

// An injected wrong result (the hidden --inject-wrong hook perturbs the
// first K elements of each checked result on every rank) is reported as
// fail with the count of wrong elements summed over ranks and iterations,
// and the run exits nonzero.
func TestBenchReportsWrongResults(t *testing.T) {
	const k, iters = 2, 3
	for _, tc := range []struct {
		name   string
		args   []string
		wrong  []float64 // per row
		rowsOf int
	}{
		{"allreduce", []string{"-n", "3", "--op", "allreduce", "--sizes", "100"}, []float64{3 * iters * k}, 1},
		// Both communicating phases (alone and overlapped) are checked,
		// each of the 2 buffers in flight.
		{"inflight", []string{"-n", "2", "--op", "allreduce", "--inflight", "2", "--sizes", "100", "--compute", "10"}, []float64{2 * 2 * 2 * iters * k}, 1},
		{"vs-dense", []string{"-n", "2", "--op", "sparse-allreduce", "--sizes", "10K", "--vs-dense"}, []float64{2 * iters * k, 2 * iters * k}, 2},
		{"algo-list", []string{"-n", "2", "--op", "sparse-allreduce", "--sizes", "10K", "--algo", "dsar,auto"}, []float64{2 * iters * k, 2 * iters * k}, 2},
		// Only the receiver checks.
		{"p2p", []string{"-n", "2", "--op", "p2p", "--sizes", "100"}, []float64{iters * k}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, errOut, err := benchJSON(t, append(tc.args, "--iters", strconv.Itoa(iters), "--warmup", "1", "--check", "--inject-wrong", strconv.Itoa(k))...)
			require.Error(t, err, "a wrong result must fail the run")
			assert.NotEqual(t, 2, exitCode(err), "not a usage error")
			assert.Contains(t, errOut, "result check failed")
			require.Len(t, rows, tc.rowsOf)
			for i, row := range rows {
				assert.Equal(t, "fail", row["check"], "%v", row)
				assert.Equal(t, tc.wrong[i], row["wrong"], "%v", row)
			}
		})
	}
}

// --bytes gives sizes in bytes, as nccl-tests' -b/-e: element counts are
// the bytes over the element size.
func TestBenchBytes(t *testing.T) {
	rows, errOut, err := benchJSON(t, "-n", "2", "--op", "allreduce", "--dtype", "float64", "--bytes", "8:64", "--iters", "2", "--warmup", "0")
	require.NoError(t, err, errOut)
	require.Len(t, rows, 4)
	for i, row := range rows {
		assert.Equal(t, float64(int(8)<<i), row["bytes"])
		assert.Equal(t, float64(int(1)<<i), row["n"])
		assert.Equal(t, "skipped", row["check"])
		assert.Nil(t, row["wrong"], "unchecked: null")
	}
	_, errOut, err = runCmd(t, 10*time.Second, nil, sparcmlBin, "bench", "--bytes", "6")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, errOut, "6 bytes is not a whole number of float32 elements")
}

// -h lists the flags and exits 0, for run and bench; the top-level usage
// names every command's flags.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags []string
	}{
		{[]string{"run", "-h"}, []string{"-n ", "--timeout", "--no-prefix", "--bind-to"}},
		{[]string{"bench", "-h"}, []string{"--op", "--sizes", "--bytes", "--redop", "--root", "--check", "--inflight", "--vs-dense"}},
		{[]string{"help"}, []string{"sparcml run", "sparcml bench", "--bytes", "--timeout", "sparcml version", "sparcml devices"}},
	} {
		out, errOut, err := runCmd(t, 10*time.Second, nil, sparcmlBin, tc.args...)
		require.NoError(t, err, "%v: %s", tc.args, errOut)
		for _, f := range tc.flags {
			assert.Contains(t, out, f, "%v", tc.args)
		}
		assert.NotContains(t, out, "inject-wrong", "the test hook stays hidden")
	}
	_, errOut, err := runCmd(t, 10*time.Second, nil, sparcmlBin)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, errOut, "sparcml bench")
	_, errOut, err = runCmd(t, 10*time.Second, nil, sparcmlBin, "run", "--bogus")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, errOut, "sparcml run -h")
}

func TestVersion(t *testing.T) {
	out, errOut, err := runCmd(t, 10*time.Second, nil, sparcmlBin, "version")
	require.NoError(t, err, errOut)
	for _, want := range []string{"sparcml ", "module:  github.com/sparcml/sparcml", "commit:  ", "go:      go", "rdma:    "} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, runtime.GOOS+"/"+runtime.GOARCH)
	if strings.Contains(os.Getenv("TAGS"), "sparcml_noverbs") {
		assert.Contains(t, out, "rdma:    not compiled in")
	}
}

// sparcml run exports torchrun's variables, MASTER_PORT distinct from the
// port of sparcml's own store.
func TestRunExportsTorchrunEnv(t *testing.T) {
	script := `echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE localworld=$LOCAL_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT sparcml=$SPARCML_ADDR"`
	out, errOut, err := runCmd(t, 30*time.Second, nil, sparcmlBin, "run", "-n", "3", "--", "sh", "-c", script)
	require.NoError(t, err, errOut)
	for r := 0; r < 3; r++ {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("[%d] ", r)) {
				line = l
			}
		}
		require.Contains(t, line, fmt.Sprintf("rank=%d local=%d world=3 localworld=3 master=127.0.0.1:", r, r), out)
		var master, store string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "master=127.0.0.1:"); ok {
				master = v
			}
			if v, ok := strings.CutPrefix(f, "sparcml=127.0.0.1:"); ok {
				store = v
			}
		}
		require.NotEmpty(t, master, line)
		require.NotEmpty(t, store, line)
		assert.NotEqual(t, master, store, "PyTorch's store and sparcml's need different ports")
	}
}

// A PyTorch script runs under sparcml run unchanged: gloo's
// init_process_group reads the torchrun variables, and an allreduce over
// the ranks gives the sum.
func TestRunTorchScript(t *testing.T) {
	const python = "/usr/bin/python3" // Debian's, where python3-torch is installed
	if err := exec.Command(python, "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("%s cannot import torch.distributed (%v): install python3-torch", python, err)
	}
	const p = 3
	script := `
import torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.tensor([float(r + 1), 2.0 ** r])
dist.all_reduce(t)
print("rank", r, "world", dist.get_world_size(), "sum", int(t[0]), int(t[1]), flush=True)
dist.destroy_process_group()
`
	out, errOut, err := runCmd(t, 3*time.Minute, nil, sparcmlBin, "run", "-n", strconv.Itoa(p), "--", python, "-c", script)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, errOut)
	// 1+2+3 and 2^0+2^1+2^2.
	for r := 0; r < p; r++ {
		assert.Contains(t, out, fmt.Sprintf("[%d] rank %d world %d sum 6 7", r, r, p))
	}
}
