package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
)

// reconnect redials the store after the connection ended with cause,
// for up to reconnectGrace, and sends the unanswered requests again; it
// returns the new connection's reader, or nil if the client is closing,
// rank 0 refuses connections (its store is gone) or the grace ran out.
// The store waits as long before it fails the launch (lost.go).
func (c *client) reconnect(cause error) *bufio.Reader {
	if c.stickyErr() != nil {
		return nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), reconnectGrace)
	defer cancel()
	backoff := firstBackoff
	for {
		conn, br, err := dialOnce(ctx, c.env, c.process)
		if err == nil {
			if !c.adopt(conn) {
				conn.Close()
				return nil
			}
			c.log.Infof(logging.Bootstrap, "the connection to the rendezvous store ended (%v); reconnected in %v",
				noEOF(cause), time.Since(start).Round(time.Millisecond))
			return br
		}
		if le, ok := asLaunchError(err); ok {
			c.fail(le) // the launch failed meanwhile: that is the cause
			return nil
		}
		var perm *permanentError
		if errors.As(err, &perm) || errors.Is(err, syscall.ECONNREFUSED) || c.stickyErr() != nil {
			return nil
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// adopt makes conn the client's connection and sends every request still
// waiting for a reply on it; false if the client failed meanwhile.
func (c *client) adopt(conn net.Conn) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.conn = conn
	c.gen++
	resend := make([]frame, 0, len(c.pending))
	for _, p := range c.pending {
		p.gen = c.gen
		resend = append(resend, p.f)
	}
	c.mu.Unlock()
	c.bw = bufio.NewWriter(conn)
	conn.SetWriteDeadline(time.Now().Add(requestWriteTimeout))
	for _, f := range resend {
		if err := c.write(f); err != nil {
			conn.Close() // the reader sees it and tries again
			break
		}
	}
	return true
}
