package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestFailureRoundTrip: every code, and one this build does not know,
// survives encoding with its origin and reason; each known code's
// failure matches its sentinel and ErrAborted, and no other sentinel.
func TestFailureRoundTrip(t *testing.T) {
	for code := Code(0); code <= numCodes; code++ {
		sent := &RemoteFailure{Peer: 3, Code: code, Reason: "reason of " + code.String()}
		got, err := DecodeFailure(AppendFailure(nil, sent), 4)
		if err != nil {
			t.Fatalf("%v: %v", code, err)
		}
		if *got != *sent {
			t.Fatalf("decoded %+v, sent %+v", got, sent)
		}
		if !errors.Is(got, ErrAborted) {
			t.Errorf("%v: %v does not match ErrAborted", code, got)
		}
		for other := Code(1); other < numCodes; other++ {
			if s := other.Err(); s != ErrAborted && errors.Is(got, s) != (other == code) {
				t.Errorf("a remote failure of code %v: errors.Is(%v) = %v", code, s, errors.Is(got, s))
			}
		}
	}
}

// The codes are wire values: a renumbering would misclassify a peer's
// failure, so each is pinned here with its name.
func TestCodeValuesAreStable(t *testing.T) {
	want := []string{"unknown", "invalid", "mismatch", "peer-lost", "timeout", "aborted", "closed", "canceled", "protocol", "revoked"}
	for v, name := range want {
		if got := Code(v).String(); got != name {
			t.Errorf("code %d is %q, want %q", v, got, name)
		}
	}
	if Code(len(want)).Known() || !Code(len(want)-1).Known() {
		t.Errorf("this build knows codes up to %d, want %d", numCodes-1, len(want)-1)
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Code
	}{
		{nil, CodeUnknown},
		{errors.New("no kind"), CodeUnknown},
		{fmt.Errorf("%w: bad root", ErrInvalid), CodeInvalid},
		{&MismatchError{}, CodeMismatch},
		{&PeerError{Peer: 1, Kind: ErrPeerLost, Err: errors.New("eof")}, CodePeerLost},
		{&PeerError{Peer: 1, Kind: ErrProtocol, Err: errors.New("bad magic")}, CodeProtocol},
		{fmt.Errorf("%w while waiting", context.DeadlineExceeded), CodeTimeout},
		{context.Canceled, CodeCanceled},
		{ErrClosed, CodeClosed},
		{fmt.Errorf("%w: %w", ErrAborted, &PeerError{Peer: 2, Kind: ErrPeerLost, Err: errors.New("eof")}), CodePeerLost},
		{fmt.Errorf("%w by rank 1", ErrRevoked), CodeRevoked},
		{&Error{Rank: 1, Peer: 0, Op: "allreduce", Seq: 4, Err: &RemoteFailure{Peer: 0, Code: CodeMismatch, Reason: "x"}}, CodeMismatch},
		{&RemoteFailure{Peer: 0, Code: 200, Reason: "newer"}, 200},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestFailureOf: the failure told to the peers leaves out this rank's
// rank, operation and sequence number, and a relayed failure keeps the
// rank that detected it.
func TestFailureOf(t *testing.T) {
	cause := fmt.Errorf("%w: rank 1 called broadcast", ErrMismatch)
	wrapped := &Error{Rank: 1, Peer: 2, Op: "allreduce", Seq: 9, Err: cause}
	f := FailureOf(1, wrapped)
	if f.Peer != 1 || f.Code != CodeMismatch || f.Reason != cause.Error() {
		t.Fatalf("FailureOf(%v) = %+v, want rank 1's mismatch without its prefix", wrapped, f)
	}
	relay := &Error{Rank: 2, Peer: 1, Op: "allreduce", Seq: 9, Err: f}
	if g := FailureOf(2, relay); *g != *f {
		t.Fatalf("relayed by rank 2: %+v, want %+v", g, f)
	}
	if g := FailureOf(0, nil); g.Code != CodeAborted {
		t.Fatalf("FailureOf(nil) = %+v, want an abort", g)
	}
	long := &RemoteFailure{Peer: 0, Code: CodeInvalid, Reason: strings.Repeat("x", 3*MaxReasonLen)}
	got, err := DecodeFailure(AppendFailure(nil, long), 1)
	if err != nil || len(got.Reason) != MaxReasonLen {
		t.Fatalf("a long reason: %+v, %v, want it cut to %d bytes", got, err, MaxReasonLen)
	}
}

func TestDecodeFailureRejects(t *testing.T) {
	ok := AppendFailure(nil, &RemoteFailure{Peer: 2, Code: CodeTimeout, Reason: "late"})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short":          ok[:failureHeaderLen-1],
		"oversized":      append(bytes.Clone(ok[:failureHeaderLen]), make([]byte, MaxReasonLen+1)...),
		"origin outside": AppendFailure(nil, &RemoteFailure{Peer: 5, Code: CodeTimeout}),
		"origin huge":    AppendFailure(nil, &RemoteFailure{Peer: -1, Code: CodeTimeout}),
	} {
		if f, err := DecodeFailure(b, 3); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %+v, %v, want ErrProtocol", name, f, err)
		}
	}
}

// FuzzDecodeFailure: any bytes off the network decode to a failure that
// encodes back to them, or to an ErrProtocol error; never a panic.
func FuzzDecodeFailure(f *testing.F) {
	for code := Code(0); code <= numCodes; code++ {
		f.Add(AppendFailure(nil, &RemoteFailure{Peer: int(code) % 4, Code: code, Reason: "seed"}), 4)
	}
	f.Add([]byte{}, 1)
	f.Add([]byte{255, 255, 255, 255, 255}, 1<<30)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		got, err := DecodeFailure(b, size)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("%v is not ErrProtocol", err)
			}
			return
		}
		if got.Peer < 0 || got.Peer >= size {
			t.Fatalf("origin %d outside a job of %d", got.Peer, size)
		}
		if again := AppendFailure(nil, got); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
		_ = got.Error()
		_ = errors.Is(got, ErrMismatch)
		_ = CodeOf(got).String()
	})
}
