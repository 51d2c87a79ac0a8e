package test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every collective of the benchmark, checked against the reference on
// every rank (--check), over each transport the job can choose on one
// host: shm forced, auto (which picks shm here) and tcp forced.
func TestBenchEveryOpPerTransport(t *testing.T) {
	if tr := wantTransport(); tr != "shm" {
		t.Skipf("SPARCML_TRANSPORT=%s forces the transport", tr)
	}
	ops := []struct{ op, algo string }{
		{"allreduce", "ring"}, {"allreduce", "rabenseifner"}, {"allreduce", "recursive-doubling"},
		{"reduce-scatter", "auto"}, {"allgather", "auto"}, {"broadcast", "auto"}, {"p2p", "auto"},
		{"barrier", "auto"}, {"sparse-allreduce", "auto"}, {"sparse-allgather", "auto"},
	}
	for _, tr := range []struct{ flag, want string }{{"shm", "shm"}, {"auto", "shm"}, {"tcp", "tcp"}} {
		for _, o := range ops {
			p := 4
			if o.op == "p2p" {
				p = 2
			}
			t.Run(fmt.Sprintf("%s/%s-%s", tr.flag, o.op, o.algo), func(t *testing.T) {
				out, errOut, err := runCmd(t, 2*time.Minute, nil, sparcmlBin, "bench", "-n", strconv.Itoa(p),
					"--op", o.op, "--algo", o.algo, "--sizes", "0,1,1000,300K", "--transport", tr.flag,
					"--iters", "3", "--warmup", "1", "--check", "--format", "json")
				require.NoError(t, err, "stderr:\n%s", errOut)
				lines := strings.Split(strings.TrimSpace(out), "\n")
				require.NotEmpty(t, lines, out)
				for _, l := range lines {
					var row map[string]any
					require.NoError(t, json.Unmarshal([]byte(l), &row), l)
					assert.Equal(t, tr.want, row["transport"], l)
					want := "ok"
					if o.op == "barrier" {
						want = "skipped"
					}
					assert.Equal(t, want, row["check"], l)
				}
			})
		}
	}
}

// Every collective, algorithm and dtype through the launcher (testprog
// checks each result against the sum of every rank's seeded input) with
// the transport forced, as TestCollectivesThroughLauncher does with the
// default.
func TestCollectivesPerTransport(t *testing.T) {
	if tr := wantTransport(); tr != "shm" {
		t.Skipf("SPARCML_TRANSPORT=%s forces the transport", tr)
	}
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			const p = 4
			seed := strconv.Itoa(int(time.Now().UnixNano() % 1000))
			out, errOut, err := runCmd(t, 4*time.Minute, []string{"SPARCML_TRANSPORT=" + tr, "SPARCML_DEBUG=INFO", "SPARCML_DEBUG_SUBSYS=init"},
				sparcmlBin, "run", "-n", strconv.Itoa(p), "--", testprogBin, "collectives", seed)
			require.NoError(t, err, "seed %s\nstdout:\n%s\nstderr:\n%s", seed, out, errOut)
			for r := 0; r < p; r++ {
				assert.Contains(t, out, fmt.Sprintf("[%d] rank %d: collectives ok", r, r))
			}
			assert.Contains(t, errOut, "[0] sparcml INFO init: transport "+tr+" to ranks 1-3 (SPARCML_TRANSPORT="+tr+")", errOut)
		})
	}
}
