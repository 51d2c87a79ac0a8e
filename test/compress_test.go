package test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `bench --op compress --check` runs the Compressor's two scopes side by
// side through the launcher, over TCP and shared memory, and compares
// every step's result and every rank's residual with the reference every
// rank computes from all ranks' seeded gradients. The global scope keeps
// about K entries and sends less than Ok-Topk's bound; the union keeps
// more than K.
func TestBenchCompressChecksBothScopes(t *testing.T) {
	for _, transport := range []string{"tcp", "shm"} {
		for _, np := range []int{3, 8} {
			t.Run(fmt.Sprintf("%s/np%d", transport, np), func(t *testing.T) {
				rows, errOut, err := benchJSON(t, "-n", strconv.Itoa(np), "--transport", transport, "--op", "compress",
					"--sizes", "40000", "--density", "0.01", "--scope", "union,global", "--global-period", "3",
					"--iters", "5", "--warmup", "1", "--check")
				require.NoError(t, err, "stderr:\n%s", errOut)
				require.Len(t, rows, 2)
				for _, row := range rows {
					assert.Equal(t, "ok", row["check"], "%v", row)
					assert.Equal(t, 0.0, row["wrong"], "%v", row)
					assert.Equal(t, 400.0, row["k"], "%v", row)
				}
				union, global := rows[0], rows[1]
				assert.Equal(t, "union", union["scope"])
				assert.Equal(t, "global", global["scope"])
				assert.Greater(t, union["kept"], 1.5*400, "%v", union)
				assert.InDelta(t, 400, global["kept"], 0.5*400, "%v", global)
				assert.Less(t, global["bytes_sent_per_rank"], global["bound_bytes_per_rank"], "%v", global)
			})
		}
	}
}

// A wrong result is reported: the hidden --inject-wrong hook perturbs
// each checked result, and the run fails.
func TestBenchCompressReportsWrongResults(t *testing.T) {
	rows, errOut, err := benchJSON(t, "-n", "3", "--op", "compress", "--sizes", "10000", "--scope", "global",
		"--iters", "2", "--warmup", "0", "--check", "--inject-wrong", "2")
	require.Error(t, err, "a wrong result must fail the run")
	assert.Contains(t, errOut, "result check failed")
	require.Len(t, rows, 1)
	assert.Equal(t, "fail", rows[0]["check"])
	assert.Equal(t, float64(3*2*2), rows[0]["wrong"])
}
