package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchLaunch starts OnLaunchFailure on st and returns the channel its
// callback sends to.
func watchLaunch(t *testing.T, st Store) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	stop := OnLaunchFailure(st, func(err error) { got <- err })
	t.Cleanup(stop)
	return got
}

// launchStores connects rank 0's store and ranks 1..size-1 to it; they
// are closed at the end of the test.
func launchStores(t *testing.T, size int) []Store {
	t.Helper()
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	addr := freeAddr(t)
	zero := mustConnect(t, ctx, testEnv(addr, 0, size, "tok"), &logs)
	zero.(*client).closeWait = 200 * time.Millisecond
	stores := []Store{zero}
	for r := 1; r < size; r++ {
		stores = append(stores, mustDial(t, ctx, testEnv(addr, r, size, "tok"), &logs))
	}
	t.Cleanup(func() {
		for i := len(stores) - 1; i >= 0; i-- {
			stores[i].Close()
		}
	})
	return stores
}

func waitLaunch(t *testing.T, got <-chan error, who string) error {
	t.Helper()
	select {
	case err := <-got:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: OnLaunchFailure did not fire within 5 s", who)
		return nil
	}
}

// A rank whose Init fails reports it; every other rank's watch fires at
// once with a LaunchError naming that rank and its error.
func TestReportInitFailureFailsTheLaunch(t *testing.T) {
	st := launchStores(t, 3)
	zero, one, two := st[0], st[1], st[2]
	watchZero, watchOne := watchLaunch(t, zero), watchLaunch(t, one)

	assert.Nil(t, ReportInitFailure(two, errors.New("tcp: connect to rank 1: no route")), "the first report is the cause")
	two.Close()
	for who, got := range map[string]<-chan error{"rank 0": watchZero, "rank 1": watchOne} {
		err := waitLaunch(t, got, who)
		var le *LaunchError
		require.ErrorAs(t, err, &le, who)
		assert.Equal(t, "rank 2 failed Init: tcp: connect to rank 1: no route", le.Cause, who)
	}
}

// A failure the store itself announced is not reported back as a new
// cause: the first cause stays the one every rank sees.
func TestReportInitFailureKeepsTheStoresCause(t *testing.T) {
	st := launchStores(t, 3)
	zero, one := st[0], st[1]
	watchOne := watchLaunch(t, one)
	assert.Nil(t, ReportInitFailure(one, fmt.Errorf("sparcml: rank 1: %w", &LaunchError{Cause: "rank 2 presented a wrong token"})))
	FailLaunch(zero, transport.CodeInvalid, "the first cause")
	err := waitLaunch(t, watchOne, "rank 1")
	var le *LaunchError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "the first cause", le.Cause)
	assert.Equal(t, transport.CodeInvalid, le.Code)
	assert.ErrorIs(t, err, transport.ErrInvalid)
}

// A rank's Init failure reaches every rank with its code: a deadline
// there is a deadline everywhere, classified without reading its text.
func TestLaunchFailureCarriesItsCode(t *testing.T) {
	st := launchStores(t, 3)
	zero, one, two := st[0], st[1], st[2]
	watchZero, watchOne := watchLaunch(t, zero), watchLaunch(t, one)
	require.Nil(t, ReportInitFailure(two, fmt.Errorf("tcp: connecting to rank 1: %w", context.DeadlineExceeded)))
	two.Close()
	for who, got := range map[string]<-chan error{"rank 0": watchZero, "rank 1": watchOne} {
		err := waitLaunch(t, got, who)
		var le *LaunchError
		require.ErrorAs(t, err, &le, who)
		assert.Equal(t, transport.CodeTimeout, le.Code, who)
		assert.ErrorIs(t, err, context.DeadlineExceeded, who)
		assert.NotErrorIs(t, err, transport.ErrInvalid, who)
	}
}

// FuzzDecodeFault: a launch failure off the store's connection decodes
// to its code and text, which encode back to the same bytes, or is a
// malformed frame.
func FuzzDecodeFault(f *testing.F) {
	f.Add(encodeFault(transport.CodeTimeout, "rank 1 never reached the store"))
	f.Add([]byte{})
	f.Add([]byte{250})
	f.Fuzz(func(t *testing.T, b []byte) {
		le, err := decodeFault(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("%v is not errMalformed", err)
			}
			return
		}
		if again := encodeFault(le.Code, le.Cause); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
		_ = errors.Is(le, transport.ErrInvalid)
		_ = le.Error()
	})
}

// A rank whose Init fails after the launch already failed (its
// connection to a rank leaving for that reason broke) hears the first
// cause in the reply to its report, whether or not its watch has fired:
// the consequence does not replace the cause.
func TestReportInitFailureAfterTheLaunchFailed(t *testing.T) {
	st := launchStores(t, 3)
	one, two := st[1], st[2]
	first := errors.New("tcp: no interface nosuchif0")
	require.Nil(t, ReportInitFailure(one, first))
	le := ReportInitFailure(two, errors.New("tcp: connect to rank 0: connection reset by peer"))
	require.NotNil(t, le, "the second report must return the launch's first cause")
	assert.Equal(t, "rank 1 failed Init: "+first.Error(), le.Cause)
}

// When rank 0's store goes away during Init, the other ranks' watches
// fire with the lost store; a store closed by its own rank does not fire.
func TestOnLaunchFailureLostStore(t *testing.T) {
	st := launchStores(t, 3)
	zero, one, two := st[0], st[1], st[2]
	watchOne, watchTwo := watchLaunch(t, one), watchLaunch(t, two)

	require.NoError(t, two.Close())
	zero.(*client).srv.stop() // as when rank 0's process dies
	err := waitLaunch(t, watchOne, "rank 1")
	assert.ErrorIs(t, err, errStoreLost)
	assert.Contains(t, err.Error(), "rank 0's rendezvous store")
	select {
	case err := <-watchTwo:
		t.Errorf("rank 2 closed its own store, yet its watch fired: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}
