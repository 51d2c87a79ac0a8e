package transporttest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// recvBuf says what buffer a receive is posted with.
type recvBuf int

const (
	bufNil     recvBuf = iota // none: the transport allocates
	bufExact                  // exactly the payload's size
	bufLarger                 // larger than the payload
	bufSmaller                // too small: the transport allocates
	bufModes
)

func (m recvBuf) String() string {
	return [...]string{"nil", "exact", "larger", "smaller"}[m]
}

func (m recvBuf) make(n int) []byte {
	switch m {
	case bufExact:
		return make([]byte, n)
	case bufLarger:
		return make([]byte, n+100)
	case bufSmaller:
		return make([]byte, n/2)
	}
	return nil
}

// expected is one receive and what it must deliver.
type expected struct {
	req  *transport.Request
	from int
	buf  []byte
	want []byte
}

// check waits for e and compares what arrived. A buffer with the capacity
// for the payload must receive it (Transport.Recv: "it lands there").
func (c *Case) check(rank int, e expected) {
	if err := c.wait(e.req); err != nil {
		c.Errorf("rank %d: %v: %v", rank, e.req, err)
		return
	}
	got := e.req.Data()
	if i := firstDiff(got, e.want); i >= 0 {
		c.Errorf("rank %d: %v: %d bytes, want %d; they differ from byte %d", rank, e.req, len(got), len(e.want), i)
		return
	}
	if len(got) > 0 && cap(e.buf) >= len(got) && &got[0] != &e.buf[:1][0] {
		c.Errorf("rank %d: %v: a %d-byte payload did not land in the posted buffer of capacity %d", rank, e.req, len(got), cap(e.buf))
	}
}

// exchangeSizes are the payload sizes every transport must carry: empty,
// tiny, around common eager limits and buffer sizes, and a few MiB.
var exchangeSizes = []int{0, 1, 100, 4095, 8192, 8193, 65536 + 7, 1 << 20, 4<<20 + 3}

// casePostBeforeAndAfter: both ranks send each other every size, each
// into every kind of buffer, with the receive posted before the message
// was sent and after it was. Every byte is checked, and Stats counts
// exactly the payloads.
func casePostBeforeAndAfter(c *Case) {
	type msg struct {
		t      transport.Tag
		n      int
		mode   recvBuf
		before bool
	}
	var msgs []msg
	for i, n := range exchangeSizes {
		for m := range bufModes {
			for _, before := range []bool{true, false} {
				msgs = append(msgs, msg{tag(1, uint64(len(msgs)), uint32(i)), n, m, before})
			}
		}
	}
	total := 0
	for _, m := range msgs {
		total += m.n
	}
	c.parallel(func(r int) {
		tr, peer := c.Ts[r], 1-r
		var recvs []expected
		post := func(before bool) {
			for _, m := range msgs {
				if m.before == before {
					buf := m.mode.make(m.n)
					recvs = append(recvs, expected{tr.Recv(peer, m.t, desc, buf), peer, buf, pattern(peer, r, m.t, m.n)})
				}
			}
		}
		post(true)
		var sends []*transport.Request
		for _, m := range msgs {
			sends = append(sends, tr.Send(peer, m.t, desc, pattern(r, peer, m.t, m.n)))
		}
		time.Sleep(50 * time.Millisecond) // let the messages arrive first
		post(false)
		for _, e := range recvs {
			c.check(r, e)
		}
		for _, s := range sends {
			if err := c.wait(s); err != nil {
				c.Errorf("rank %d: %v: %v", r, s, err)
			}
		}
	})
	for r, tr := range c.Ts {
		st := tr.Stats()
		want := transport.Stats{BytesSent: uint64(total), BytesRecv: uint64(total), MsgsSent: uint64(len(msgs)), MsgsRecv: uint64(len(msgs))}
		if st != want {
			c.Errorf("rank %d: Stats %+v, want %+v (payload bytes and messages only)", r, st, want)
		}
	}
}

// caseLargeMessages: multi-MiB messages, one gathered from several
// buffers, in both directions at once.
func caseLargeMessages(c *Case, large int) {
	c.parallel(func(r int) {
		tr, peer := c.Ts[r], 1-r
		t0, t1 := tag(2, 1, 0), tag(2, 2, 0)
		in0 := make([]byte, large)
		e0 := expected{tr.Recv(peer, t0, desc, in0), peer, in0, pattern(peer, r, t0, large)}
		out0 := pattern(r, peer, t0, large)
		out1 := pattern(r, peer, t1, large/2)
		s0 := tr.Send(peer, t0, desc, out0)
		// The second message goes out as three buffers of one message.
		s1 := tr.Send(peer, t1, desc, out1[:1000], out1[1000:len(out1)-1], out1[len(out1)-1:])
		e1 := expected{tr.Recv(peer, t1, desc, nil), peer, nil, pattern(peer, r, t1, large/2)}
		c.check(r, e0)
		c.check(r, e1)
		for _, s := range []*transport.Request{s0, s1} {
			if err := c.wait(s); err != nil {
				c.Errorf("rank %d: %v: %v", r, s, err)
			}
		}
	})
}

// caseManyInFlight: every rank sends many messages of many sizes to every
// other, over several operations, and receives them in a shuffled order,
// some posted before and some after the sends, waiting for them in
// reverse order: completions come out of order, and none is mixed up.
func caseManyInFlight(c *Case) {
	const perPeer = 48
	sizes := []int{0, 10, 5000, 9000, 70000, 300000}
	c.parallel(func(r int) {
		tr, p := c.Ts[r], len(c.Ts)
		type rx struct {
			from int
			t    transport.Tag
			n    int
		}
		var rxs []rx
		for from := range p {
			if from == r {
				continue
			}
			for i := range perPeer {
				rxs = append(rxs, rx{from, tag(3, uint64(i%6), uint32(i)), sizes[i%len(sizes)]})
			}
		}
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		rng.Shuffle(len(rxs), func(i, j int) { rxs[i], rxs[j] = rxs[j], rxs[i] })
		var recvs []expected
		post := func(part []rx) {
			for _, x := range part {
				buf := make([]byte, x.n)
				recvs = append(recvs, expected{tr.Recv(x.from, x.t, desc, buf), x.from, buf, pattern(x.from, r, x.t, x.n)})
			}
		}
		post(rxs[:len(rxs)/2])
		var sends []*transport.Request
		for i := range perPeer {
			for d := 1; d < p; d++ {
				to := (r + d) % p
				t := tag(3, uint64(i%6), uint32(i))
				sends = append(sends, tr.Send(to, t, desc, pattern(r, to, t, sizes[i%len(sizes)])))
			}
		}
		post(rxs[len(rxs)/2:])
		for i := len(recvs) - 1; i >= 0; i-- {
			c.check(r, recvs[i])
		}
		for _, s := range sends {
			if err := c.wait(s); err != nil {
				c.Errorf("rank %d: %v: %v", r, s, err)
			}
		}
	})
}

// roundTrip sends one message of n bytes from a to b and back, checking
// both: a transport (or a pair of ranks) that still works.
func (c *Case) roundTrip(a, b int, t transport.Tag, n int) error {
	ta, tb := c.Ts[a], c.Ts[b]
	back := t
	back.Step++
	rb := tb.Recv(a, t, desc, nil)
	ra := ta.Recv(b, back, desc, make([]byte, n))
	sa := ta.Send(b, t, desc, pattern(a, b, t, n))
	if err := c.wait(rb); err != nil {
		return fmt.Errorf("rank %d receiving from rank %d: %w", b, a, err)
	}
	if firstDiff(rb.Data(), pattern(a, b, t, n)) >= 0 {
		return fmt.Errorf("rank %d received a wrong payload from rank %d", b, a)
	}
	sb := tb.Send(a, back, desc, pattern(b, a, back, n))
	if err := c.wait(ra); err != nil {
		return fmt.Errorf("rank %d receiving from rank %d: %w", a, b, err)
	}
	if firstDiff(ra.Data(), pattern(b, a, back, n)) >= 0 {
		return fmt.Errorf("rank %d received a wrong payload from rank %d", a, b)
	}
	for _, s := range []*transport.Request{sa, sb} {
		if err := c.wait(s); err != nil {
			return fmt.Errorf("%v: %w", s, err)
		}
	}
	return nil
}
