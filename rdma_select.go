package sparcml

import (
	"context"
	"errors"

	"github.com/sparcml/sparcml/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// rdmaAvailable reports whether this rank could use the RDMA transport.
func rdmaAvailable(env bootstrap.Env) error {
	return errors.New("built without the RDMA transport")
}

func newRDMA(ctx context.Context, env bootstrap.Env, store bootstrap.Store, logf func(string, ...any)) (transport.Transport, error) {
	return nil, errors.New("RDMA not available: built without the RDMA transport")
}
