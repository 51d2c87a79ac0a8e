package collectives_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/transport"
)

// segmented is a transport that asks for segments of its own size and
// records the largest message it was given.
type segmented struct {
	transport.Transport
	seg     int
	largest *atomic.Int64
}

func (s segmented) Caps() transport.Capabilities {
	return transport.Capabilities{SegmentBytes: s.seg}
}

func (s segmented) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	for {
		old := s.largest.Load()
		if int64(n) <= old || s.largest.CompareAndSwap(old, int64(n)) {
			break
		}
	}
	return s.Transport.Send(peer, tag, desc, bufs...)
}

// A transport's segment size (transport.Capabilities) bounds the messages
// of the pipelined dense algorithms, and the results stay those of the
// reference.
func TestTransportSegmentSize(t *testing.T) {
	const p, n, seg = 4, 50_000, 4 << 10
	for _, algo := range []collectives.Algo{collectives.AlgoRing, collectives.AlgoRabenseifner} {
		var largest atomic.Int64
		outs := make([][]float32, p)
		errs := coltest.Run(t, p, denseTimeout, func(ctx context.Context, tr transport.Transport) error {
			op := coltest.NewOp(ctx, segmented{Transport: tr, seg: seg, largest: &largest}, 1, transport.Desc{})
			data := denseInput[float32](7, tr.Rank(), n)
			outs[tr.Rank()] = data
			_, err := collectives.Allreduce(op, data, collectives.Sum, algo, collectives.DefaultCostModel)
			return err
		})
		requireNoErrors(t, errs)
		want := make([]float64, n)
		for r := range p {
			for i, v := range denseInput[float32](7, r, n) {
				want[i] += float64(v)
			}
		}
		for r := range p {
			for i := range n {
				require.InDelta(t, want[i], float64(outs[r][i]), 1e-3, "%v rank %d element %d", algo, r, i)
			}
		}
		require.LessOrEqual(t, largest.Load(), int64(seg), "%v: the largest message", algo)
		require.Greater(t, largest.Load(), int64(seg/2), "%v: segments of about the transport's size", algo)
	}
}
