package sparcml

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The default timeout still fails an operation nobody completes.
func TestDefaultTimeoutStillApplies(t *testing.T) {
	comms, err := Local(2, WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	err = Recv(context.Background(), comms[0], make([]float32, 1), 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
}
