package rdma

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
	"github.com/stretchr/testify/require"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := header{Kind: kindCTS, Credits: 17, Len: 8000,
		Tag:  transport.Tag{Comm: 3, Seq: 1 << 40, Step: 9},
		Desc: transport.Desc{Kind: transport.OpAllreduce, DType: 2, Reduce: 1, Algo: 4, Root: -1, Count: 1 << 33, Param: 1<<40 | 3},
		Size: 0xdeadbeef00, ID: 7, ID2: immMask, RKey: 0x1234, Flags: ctsDiscard}
	b := make([]byte, hdrSize)
	h.encode(b)
	var g header
	require.NoError(t, g.decode(b))
	require.Equal(t, h, g)

	b[0] = 9
	require.ErrorIs(t, g.decode(b), transport.ErrProtocol)
	b[0], b[1] = wireVersion, 42
	require.ErrorIs(t, g.decode(b), transport.ErrProtocol)
	require.ErrorIs(t, g.decode(b[:10]), transport.ErrProtocol)
}

func TestConnInfoRoundTrip(t *testing.T) {
	c := connInfo{LinkLayer: 2, MTU: 5, LID: 0, QPN: 0x11, PSN: 0xabcdef, RingAddr: 0x7f0000001000,
		RingRKey: 0x99, Slots: 32, SlotSize: 8256}
	copy(c.GID[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	var d connInfo
	require.NoError(t, d.decode(c.encode()))
	require.Equal(t, c, d)
	require.ErrorIs(t, d.decode([]byte("tcp:10.0.0.1:1234")), transport.ErrProtocol)
}

func TestImmAndWRID(t *testing.T) {
	for _, k := range []uint32{immEager, immDone, immCredit} {
		kind, val := splitImm(makeImm(k, 12345))
		require.Equal(t, k, kind)
		require.Equal(t, uint32(12345), val)
	}
	kind, val := splitImm(makeImm(immDone, immMask))
	require.Equal(t, uint32(immDone), kind)
	require.Equal(t, uint32(immMask), val)
	for _, peer := range []int{0, 1, 4095, 1<<15 - 1} {
		k, p, id := splitWRID(makeWRID(wrRndv, peer, 0xfffffff0))
		require.Equal(t, uint8(wrRndv), k)
		require.Equal(t, peer, p)
		require.Equal(t, uint32(0xfffffff0), id)
	}
}

func TestParseDevice(t *testing.T) {
	n, p, err := parseDevice("rxe0:1")
	require.NoError(t, err)
	require.Equal(t, "rxe0", n)
	require.Equal(t, uint8(1), p)
	n, p, err = parseDevice("mlx5_0")
	require.NoError(t, err)
	require.Equal(t, "mlx5_0", n)
	require.Zero(t, p)
	for _, bad := range []string{"rxe0:0", "rxe0:x", "rxe0:300"} {
		_, _, err = parseDevice(bad)
		require.Error(t, err, bad)
	}
}

func TestConfigValidate(t *testing.T) {
	st := bootstrap.NewMemStore()
	good := Config{Rank: 0, Size: 2, Store: st, GIDIndex: -1}
	good.setDefaults()
	require.NoError(t, good.validate())
	for _, c := range []Config{
		{Rank: 2, Size: 2, Store: st},
		{Rank: 0, Size: 2},
		{Rank: 0, Size: 2, Store: st, GIDIndex: -2},
		{Rank: 0, Size: 2, Store: st, EagerLimit: 4 << 20},
	} {
		c.setDefaults()
		require.Error(t, c.validate(), "%+v", c)
	}
}

// TestUnavailable runs on hosts without RDMA (and on stub builds): both
// entry points must say why with verbs.ErrUnavailable, and never hang.
func TestUnavailable(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("an RDMA device is available here")
	}
	require.True(t, errors.Is(err, verbs.ErrUnavailable), "%v", err)
	if !verbs.Built {
		require.ErrorContains(t, err, "built without libibverbs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	_, err = New(ctx, Config{Rank: 0, Size: 2, Store: bootstrap.NewMemStore(), GIDIndex: -1})
	require.ErrorIs(t, err, verbs.ErrUnavailable)
}

// FuzzHeaderDecode: any bytes either decode to a header that encodes back
// to the same bytes (the version byte included) or are a protocol error.
func FuzzHeaderDecode(f *testing.F) {
	for _, h := range []header{
		{Kind: kindData, Len: 5, Tag: transport.Tag{Comm: 1, Seq: 2, Step: 3}, Desc: desc},
		{Kind: kindCTS, Tag: transport.Tag{Comm: 1}, Size: 1 << 40, ID: 9, ID2: 8, RKey: 7, Flags: ctsDiscard},
		{Kind: kindBye, Len: 10},
	} {
		b := make([]byte, hdrSize)
		h.encode(b)
		f.Add(b)
	}
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h header
		if err := h.decode(b); err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		if h.Kind < kindData || h.Kind > kindMax {
			t.Fatalf("accepted kind %d", h.Kind)
		}
		again := make([]byte, hdrSize)
		h.encode(again)
		if !bytes.Equal(again, b[:hdrSize]) {
			t.Fatalf("re-encoding %+v gives %x, input %x", h, again, b[:hdrSize])
		}
	})
}

// FuzzConnInfoDecode: connection data from the store is accepted only in
// this version's exact form, and then encodes back to the same bytes.
func FuzzConnInfoDecode(f *testing.F) {
	c := connInfo{LinkLayer: 2, MTU: 5, QPN: 0x11, PSN: 0xabcdef, RingAddr: 0x7f0000001000, RingRKey: 0x99, Slots: 32, SlotSize: 8256}
	f.Add(c.encode())
	f.Add([]byte("tcp:10.0.0.1:1234"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d connInfo
		if err := d.decode(b); err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		if !bytes.Equal(d.encode(), b) {
			t.Fatalf("re-encoding %+v gives %x, input %x", d, d.encode(), b)
		}
	})
}

// TestFailurePayload: a failop message carries the failure's code and
// origin, its text cut to the eager limit, and decodes on the peer to a
// failure of the same code.
func TestFailurePayload(t *testing.T) {
	cause := &transport.PeerError{Peer: 2, Kind: transport.ErrProtocol, Err: errors.New("bad frame")}
	for _, limit := range []int{1, 12, defaultEager} {
		f, err := transport.DecodeFailure(failurePayload(1, cause, limit), 3)
		require.NoError(t, err, "eager limit %d", limit)
		require.Equal(t, 1, f.Peer)
		require.Equal(t, transport.CodeProtocol, f.Code)
		require.True(t, strings.HasPrefix(cause.Error(), f.Reason), "reason %q of %q", f.Reason, cause)
		require.ErrorIs(t, f, transport.ErrProtocol)
	}
}
