package sparcml

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/sparcml/sparcml/bootstrap"
	"github.com/sparcml/sparcml/rdma"
	"github.com/sparcml/sparcml/transport"
)

// rdmaAvailable reports whether this rank could use the RDMA transport
// (nil), or why not.
func rdmaAvailable(env bootstrap.Env) error {
	return rdma.Available()
}

// newRDMA connects the RDMA transport with the device, port and GID index
// from SPARCML_IB_DEV and SPARCML_IB_GID_INDEX, or the device behind
// SPARCML_IFNAME.
func newRDMA(ctx context.Context, env bootstrap.Env, store bootstrap.Store, logf func(string, ...any)) (transport.Transport, error) {
	gid := -1
	if s := os.Getenv("SPARCML_IB_GID_INDEX"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: SPARCML_IB_GID_INDEX=%q is not a GID index", ErrInvalid, s)
		}
		gid = v
	}
	t, err := rdma.New(ctx, rdma.Config{
		Rank: env.Rank, Size: env.Size, Store: store,
		Device: os.Getenv("SPARCML_IB_DEV"), GIDIndex: gid, IfName: env.IfName, Logf: logf,
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}
