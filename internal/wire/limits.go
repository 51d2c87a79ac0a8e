package wire

import (
	"fmt"
	"time"
)

// CloseTimeout bounds how long Close waits for a peer that does not take
// what this rank still sends: the end of a message being written and the
// goodbye (and, over shared memory, the peer's reads of this rank's
// buffers under way).
const CloseTimeout = 2 * time.Second

// Defaults of Limits' zero fields.
const (
	DefaultUnexpectedLimit = 64 << 20
	DefaultMaxMessage      = 1 << 34
)

// Limits bound what one peer can make this rank hold.
type Limits struct {
	// UnexpectedLimit is the per-peer budget of bytes of messages that
	// arrived before their receive was posted (default 64 MiB). When it
	// is spent, this rank stops reading that peer until receives are
	// posted, so that the peer's sends wait.
	UnexpectedLimit int64
	// MaxMessage is the largest payload accepted from a peer (default
	// 1<<34); a larger one is a protocol error. Sending a larger message
	// fails at once.
	MaxMessage int64
}

// WithDefaults returns l with its zero fields set to the defaults, or an
// error naming a negative one.
func (l Limits) WithDefaults() (Limits, error) {
	if l.UnexpectedLimit == 0 {
		l.UnexpectedLimit = DefaultUnexpectedLimit
	}
	if l.UnexpectedLimit < 0 {
		return l, fmt.Errorf("negative UnexpectedLimit %d", l.UnexpectedLimit)
	}
	if l.MaxMessage == 0 {
		l.MaxMessage = DefaultMaxMessage
	}
	if l.MaxMessage < 0 {
		return l, fmt.Errorf("negative MaxMessage %d", l.MaxMessage)
	}
	return l, nil
}
