package bootstrap

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// Each rank publishes a small progress record (what it has started, for
// stall reports) to the store now and then; the store keeps the latest one
// of each rank with the time it arrived, so a rank that has stopped
// publishing (stopped, hung, or cut off) shows its age. Ages are measured
// by rank 0's clock only, so the ranks' clocks need not agree.

// MaxProgressLen bounds one progress record.
const MaxProgressLen = 256

// progressEntry is a rank's latest record on the server.
type progressEntry struct {
	value []byte
	at    time.Time
}

// RankProgress is one rank's latest progress record as the store holds
// it: Age is how long ago it arrived; Seen is false if the rank never
// published one.
type RankProgress struct {
	Rank  int
	Value []byte
	Age   time.Duration
	Seen  bool
}

// PublishProgress replaces this rank's progress record on the store. It
// does not wait for an answer. On stores other than Connect's it does
// nothing.
func PublishProgress(st Store, value []byte) error {
	c, ok := st.(*client)
	if !ok {
		return nil
	}
	if len(value) > MaxProgressLen {
		return fmt.Errorf("progress record of %d bytes exceeds %d", len(value), MaxProgressLen)
	}
	if err := c.stickyErr(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.send(ctx, frame{op: opProgress, value: value})
}

// QueryProgress returns every rank's latest progress record, in rank
// order. On stores other than Connect's it returns nil.
func QueryProgress(ctx context.Context, st Store) ([]RankProgress, error) {
	c, ok := st.(*client)
	if !ok {
		return nil, nil
	}
	r, err := c.call(ctx, frame{op: opProgressQuery})
	if err != nil {
		return nil, err
	}
	if r.op != opValue {
		return nil, replyError(r)
	}
	return decodeProgress(r.value)
}

// setProgress stores c's record (opProgress has no reply).
func (s *server) setProgress(c *serverConn, value []byte) error {
	if len(value) > MaxProgressLen {
		return fmt.Errorf("%w: progress record of %d bytes exceeds %d", errMalformed, len(value), MaxProgressLen)
	}
	s.mu.Lock()
	s.progress[c.rank] = progressEntry{value: value, at: time.Now()}
	s.mu.Unlock()
	return nil
}

// queryProgress answers opProgressQuery with every rank's record.
func (s *server) queryProgress(c *serverConn, id uint32) {
	now := time.Now()
	s.mu.Lock()
	ps := make([]RankProgress, s.size)
	for r := range ps {
		ps[r].Rank = r
		if e, ok := s.progress[r]; ok {
			ps[r] = RankProgress{Rank: r, Value: e.value, Age: now.Sub(e.at), Seen: true}
		}
	}
	s.mu.Unlock()
	c.out.push(frame{op: opValue, id: id, value: encodeProgress(ps)})
}

// The reply of opProgressQuery: for each rank in order,
//
//	age   uint32  milliseconds since the record arrived; 0xffffffff: none
//	len   uint16  record length, at most MaxProgressLen
//	value [len]byte
const noProgress = 0xffffffff

func encodeProgress(ps []RankProgress) []byte {
	var b []byte
	for _, p := range ps {
		age := uint32(noProgress)
		if p.Seen {
			age = uint32(min(p.Age.Milliseconds(), noProgress-1))
		}
		b = binary.BigEndian.AppendUint32(b, age)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.Value)))
		b = append(b, p.Value...)
	}
	return b
}

func decodeProgress(b []byte) ([]RankProgress, error) {
	var ps []RankProgress
	for len(b) > 0 {
		if len(b) < 6 {
			return nil, fmt.Errorf("%w: truncated progress entry", errMalformed)
		}
		age, n := binary.BigEndian.Uint32(b), int(binary.BigEndian.Uint16(b[4:]))
		b = b[6:]
		if n > MaxProgressLen || n > len(b) {
			return nil, fmt.Errorf("%w: progress record of %d bytes (%d left, max %d)", errMalformed, n, len(b), MaxProgressLen)
		}
		p := RankProgress{Rank: len(ps)}
		if age != noProgress {
			p.Seen, p.Age = true, time.Duration(age)*time.Millisecond
			p.Value = append([]byte(nil), b[:n]...)
		} else if n != 0 {
			return nil, fmt.Errorf("%w: a rank without progress has a %d-byte record", errMalformed, n)
		}
		ps = append(ps, p)
		b = b[n:]
	}
	return ps, nil
}
