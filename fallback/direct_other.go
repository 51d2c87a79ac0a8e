//go:build !linux

package fallback

// writeNow writes nothing on this platform: every frame goes through the
// writer goroutine.
func (c *conn) writeNow(iov [][]byte) (int, error) { return 0, nil }

// lowatSafe: receive low-water marks are only used on Linux.
const lowatSafe = false

func (c *conn) setLowat(n int) {}

// readTwo is not used on this platform.
func (c *conn) readTwo(a, b []byte) (int, error) { return c.nc.Read(a) }

// scatterReads: whether the reader uses readTwo.
const scatterReads = false
