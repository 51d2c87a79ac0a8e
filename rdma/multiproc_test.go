package rdma

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
	"github.com/stretchr/testify/require"
)

// TestMultiProcess is one rank of a job whose ranks are separate processes
// (or machines: test/vm's run2 boots two guests, each with its own rxe0),
// joined through the real bootstrap store. It runs only when launched with
// SPARCML_RANK, SPARCML_SIZE, SPARCML_ADDR and SPARCML_TOKEN set, e.g.
//
//	test/vm/vm.sh run2 -- env SPARCML_RANK=0 SPARCML_SIZE=2 SPARCML_ADDR=10.199.0.1:29400 \
//	    SPARCML_TOKEN=t build/rdma.test -test.run TestMultiProcess -- env SPARCML_RANK=1 ...
func TestMultiProcess(t *testing.T) {
	t.Logf("retry count %d", testRetry())
	if os.Getenv("SPARCML_RANK") == "" {
		t.Skip("not launched as a rank (SPARCML_RANK unset)")
	}
	needRDMA(t)
	s, err := config.Load(os.Getenv)
	require.NoError(t, err)
	env, err := bootstrap.FromEnv(bootstrap.Settings{Rank: s.Rank, Size: s.Size, Addr: s.Addr, Token: s.Token,
		Port: s.Port, IfName: s.IfName, Timeout: s.Timeout}, os.Getenv)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*testDeadline)
	defer cancel()
	log := logging.ToPrintf(t.Logf)
	st, err := bootstrap.Connect(ctx, env, log)
	require.NoError(t, err)
	defer st.Close()
	tr, err := New(ctx, Config{Rank: env.Rank, Size: env.Size, Store: st, GIDIndex: -1,
		Device: s.IBDev, IfName: env.IfName, Log: log, RetryCount: testRetry()})
	require.NoError(t, err)
	defer tr.Close()

	sizes := []int{0, 1, 4095, defaultEager, defaultEager + 1, 65536, 1<<20 + 3, 8 << 20}
	start := time.Now()
	var sends, recvs []*transport.Request
	var want [][]byte
	for peer := range env.Size {
		if peer == env.Rank {
			continue
		}
		for i, n := range sizes {
			var buf []byte
			if i%2 == 0 {
				buf = make([]byte, n)
			}
			recvs = append(recvs, tr.Recv(peer, transport.Tag{Comm: 1, Seq: uint64(i), Step: uint32(peer)}, desc, buf))
			want = append(want, pattern(peer, env.Rank, n))
			sends = append(sends, tr.Send(peer, transport.Tag{Comm: 1, Seq: uint64(i), Step: uint32(env.Rank)}, desc,
				split(pattern(env.Rank, peer, n), i)...))
		}
	}
	for _, s := range sends {
		require.NoError(t, s.Wait(ctx))
	}
	for i, r := range recvs {
		require.NoError(t, r.Wait(ctx))
		require.True(t, bytes.Equal(want[i], r.Data()), "%v: %d bytes differ", r, len(want[i]))
	}
	st2 := tr.Stats()
	t.Logf("rank %d: %d messages, %d bytes each way in %v over %s", env.Rank, st2.MsgsRecv, st2.BytesRecv,
		time.Since(start), tr.Device())
	require.NoError(t, tr.Err())
	// Nobody closes before everybody has its data (a peer that closes is
	// lost for the others, by design).
	require.NoError(t, st.Set(ctx, fmt.Sprintf("test/done/%d", env.Rank), nil))
	for r := range env.Size {
		_, err := st.Get(ctx, fmt.Sprintf("test/done/%d", r))
		require.NoError(t, err)
	}
}

// testRetry lets a run over a lossy emulated link use rxe's endless retry.
func testRetry() uint8 {
	var n uint8
	fmt.Sscan(os.Getenv("SPARCML_TEST_RETRY"), &n)
	return n
}
