package bootstrap

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func encodeFrames(t testing.TB, frames ...frame) []byte {
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	for _, f := range frames {
		if err := writeFrame(bw, f); err != nil {
			t.Fatal(err)
		}
	}
	bw.Flush()
	return buf.Bytes()
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []frame{
		{op: opHello, id: 1, value: encodeHello(hello{version: 1, rank: 3, size: 8, process: 9})},
		{op: opSet, id: 2, key: "addr/3", value: []byte("10.0.0.3:4000")},
		{op: opGet, id: 0xffffffff, key: strings.Repeat("k", MaxKeyLen)},
		{op: opCancel, id: 7},
		{op: opBye, id: 8},
		{op: opOK, id: 2},
		{op: opValue, id: 3, value: []byte{0, 1, 2}},
		{op: opErr, id: 4, value: []byte("nope")},
	}
	data := encodeFrames(t, frames...)
	r := bytes.NewReader(data)
	for i, want := range frames {
		got, err := readFrame(r)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.op != want.op || got.id != want.id || got.key != want.key || !bytes.Equal(got.value, want.value) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := readFrame(r); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	// Every strict prefix of a frame is an error, never a frame.
	one := encodeFrames(t, frames[1])
	for n := 1; n < len(one); n++ {
		if f, err := readFrame(bytes.NewReader(one[:n])); err == nil {
			t.Fatalf("%d-byte prefix decoded as %+v", n, f)
		}
	}
	h, err := decodeHello(frames[0].value)
	if err != nil || h != (hello{version: 1, rank: 3, size: 8, process: 9}) {
		t.Fatalf("hello: %+v, %v", h, err)
	}
}

func TestWriteFrameRefusesOversized(t *testing.T) {
	bw := bufio.NewWriter(io.Discard)
	if err := writeFrame(bw, frame{op: opSet, key: strings.Repeat("k", MaxKeyLen+1)}); err == nil {
		t.Error("oversized key written")
	}
	if err := writeFrame(bw, frame{op: opSet, key: "k", value: make([]byte, MaxValueLen+1)}); err == nil {
		t.Error("oversized value written")
	}
}

func TestReadFrameRejects(t *testing.T) {
	cases := map[string][]byte{
		"unknown op":    {0x00, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0},
		"key too long":  {opSet, 0, 0, 0, 1, 0x04, 0x01, 0, 0, 0, 0},
		"value too big": {opSet, 0, 0, 0, 1, 0, 1, 0x01, 0, 0, 1},
		"huge value":    {opSet, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0xff},
	}
	for name, data := range cases {
		_, err := readFrame(bytes.NewReader(data))
		if !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, helloLen-1), make([]byte, helloLen+1)} {
		if _, err := decodeHello(bad); !errors.Is(err, errMalformed) {
			t.Errorf("hello of %d bytes: %v", len(bad), err)
		}
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, must reject frames over the limits, and every frame it accepts
// must encode back to exactly the bytes it came from.
func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrames(f, frame{op: opSet, id: 9, key: "a", value: []byte("b")}))
	f.Add(encodeFrames(f, frame{op: opHello, id: 1, value: encodeHello(hello{1, 2, 3, 4})}, frame{op: opBye, id: 2}))
	f.Add([]byte{opGet, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{opValue, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			start := len(data) - r.Len()
			fr, err := readFrame(r)
			if err != nil {
				return
			}
			if len(fr.key) > MaxKeyLen || len(fr.value) > MaxValueLen || !knownOp(fr.op) {
				t.Fatalf("accepted a frame outside the limits: op %#x key %d value %d", fr.op, len(fr.key), len(fr.value))
			}
			consumed := data[start : len(data)-r.Len()]
			if again := encodeFrames(t, fr); !bytes.Equal(again, consumed) {
				t.Fatalf("re-encoding %x gives %x", consumed, again)
			}
			if fr.op == opHello {
				if h, err := decodeHello(fr.value); err == nil && !bytes.Equal(encodeHello(h), fr.value) {
					t.Fatalf("hello %x decodes to %+v which encodes differently", fr.value, h)
				}
			}
		}
	})
}

// FuzzServerRequests feeds arbitrary bytes, as an authenticated rank would
// send them, to the server's request loop: it must never panic or hang,
// and must leave the server's state consistent.
func FuzzServerRequests(f *testing.F) {
	f.Add(encodeFrames(f,
		frame{op: opGet, id: 1, key: "k"},
		frame{op: opSet, id: 2, key: "k", value: []byte("v")},
		frame{op: opSet, id: 3, key: "k", value: []byte("w")},
		frame{op: opGet, id: 4, key: "never"},
		frame{op: opCancel, id: 4},
		frame{op: opGet, id: 5, key: "never"},
		frame{op: opGet, id: 5, key: "never"},
		frame{op: opStatus, id: 6},
		frame{op: opBye, id: 7}))
	f.Add(encodeFrames(f, frame{op: opSet, id: 1, key: "", value: nil}, frame{op: opHello, id: 2}))
	f.Add([]byte{opSet, 0, 0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newServer(2, []byte("tok"), nil)
		serverSide, clientSide := net.Pipe()
		c := &serverConn{conn: serverSide, br: bufio.NewReader(serverSide), rank: 1, out: newOutQueue(), gets: make(map[uint32]string)}
		if refusal, _ := s.register(c, hello{version: protocolVersion, rank: 1, size: 2}); refusal != "" {
			t.Fatal(refusal)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.serveConn(c)
			serverSide.Close()
		}()
		// Drain replies so the server never blocks on writing them.
		go io.Copy(io.Discard, clientSide)
		clientSide.SetWriteDeadline(time.Now().Add(5 * time.Second))
		clientSide.Write(data)
		clientSide.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not finish with the connection")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.waiting) != 0 || len(c.gets) != 0 || s.ranks[1] != nil || (s.state[1] != rankFinished && s.state[1] != rankLost) {
			t.Fatalf("state left behind: waiting %v, gets %v, rank slot %v, state %v", s.waiting, c.gets, s.ranks[1], s.state[1])
		}
	})
}

// FuzzDecodeClaim: the claim is read from unauthenticated connections, so
// any bytes must give a rank or an error, never a panic, and a claim
// that decodes must be the encoding of its rank.
func FuzzDecodeClaim(f *testing.F) {
	f.Add(encodeClaim(3))
	f.Add([]byte("SPCL\x00\x01\x00\x00\x00\x01"))
	f.Add([]byte("GET / HTTP/1.1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rank, err := decodeClaim(data)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeClaim(int(rank)), data) {
			t.Fatalf("claim %x decodes to rank %d, which encodes differently", data, rank)
		}
	})
}

// FuzzDecodeRanks: a status reply's rank list.
func FuzzDecodeRanks(f *testing.F) {
	f.Add(encodeRanks([]int{1, 5}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		ranks, err := decodeRanks(data)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeRanks(ranks), data) {
			t.Fatalf("%x decodes to %v, which encodes differently", data, ranks)
		}
	})
}

// FuzzDecodeProgress: the progress query's reply.
func FuzzDecodeProgress(f *testing.F) {
	f.Add(encodeProgress([]RankProgress{{Rank: 0, Value: []byte("abc"), Age: time.Second, Seen: true}, {Rank: 1}}))
	f.Add([]byte{0, 0, 0, 1, 0, 9, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := decodeProgress(data)
		if err != nil {
			return
		}
		for i, p := range ps {
			if p.Rank != i || len(p.Value) > MaxProgressLen || (!p.Seen && len(p.Value) > 0) {
				t.Fatalf("entry %d: %+v", i, p)
			}
		}
		if again, err := decodeProgress(encodeProgress(ps)); err != nil || len(again) != len(ps) {
			t.Fatalf("re-encoding %v: %v, %v", ps, again, err)
		}
	})
}
