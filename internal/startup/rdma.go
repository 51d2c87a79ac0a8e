package startup

import (
	"context"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/rdma"
	"github.com/sparcml/sparcml/transport"
)

// rdmaAvailable reports whether this rank could use the RDMA transport
// (nil), or why not.
func rdmaAvailable() error {
	return rdma.Available()
}

// newRDMA connects the RDMA transport with the device, port and GID index
// of SPARCML_IB_DEV and SPARCML_IB_GID_INDEX, or the device behind the
// interface (SPARCML_IFNAME), and the RDMA tuning of the configuration
// table.
func newRDMA(ctx context.Context, s *config.Settings, env bootstrap.Env, store bootstrap.Store, log *logging.Logger) (transport.Transport, error) {
	t, err := rdma.New(ctx, rdma.Config{
		Rank: env.Rank, Size: env.Size, Store: store,
		Device: s.IBDev, GIDIndex: s.IBGIDIndex, IfName: env.IfName, Log: log,
		EagerLimit: s.RDMAEager, Spin: s.RDMASpin, WaitSpin: s.RDMAWaitSpin, NoAdvertise: !s.RDMAAdvertise,
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}
