package logging

import (
	"sync"
	"time"
)

// Limiter lets at most one line through per interval and counts the ones
// it held back, so that a flood (a port scanner, a misconfigured job
// dialling the wrong address) costs a line per interval rather than one
// per event. The zero value passes one line per DefaultLimit.
type Limiter struct {
	// Every is the interval; zero means DefaultLimit.
	Every time.Duration

	mu   sync.Mutex
	next time.Time
	held int
}

// DefaultLimit is a Limiter's interval when Every is zero.
const DefaultLimit = 10 * time.Second

// Allow reports whether a line may be written now and, if so, how many
// were held back since the last one that was.
func (r *Limiter) Allow() (ok bool, held int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.next) {
		r.held++
		return false, 0
	}
	every := r.Every
	if every <= 0 {
		every = DefaultLimit
	}
	r.next = now.Add(every)
	held, r.held = r.held, 0
	return true, held
}

// WarnLimited writes a warning of subsystem s unless lim held it back;
// the line says how many like it were held back before it.
func (l *Logger) WarnLimited(lim *Limiter, s Subsys, format string, args ...any) {
	if !l.Enabled(Warn, s) {
		return
	}
	ok, held := lim.Allow()
	if !ok {
		return
	}
	if held > 0 {
		format += " (and %d more like it since the last one shown)"
		args = append(args[:len(args):len(args)], held)
	}
	l.write(Warn, s, format, args)
}
