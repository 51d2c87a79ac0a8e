package sparcml

import (
	"os"
	"strconv"
	"time"
)

// Option adjusts Init, NewComm or Local. Options override the environment.
type Option func(*config)

type config struct {
	rank, size  int // -1: from the environment
	addr        string
	token       string
	ifname      string
	transport   string
	timeout     time.Duration
	timeoutSet  bool
	initTimeout time.Duration
	logf        func(format string, args ...any)
}

func defaultConfig() config {
	c := config{rank: -1, size: -1, initTimeout: 2 * time.Minute,
		transport: os.Getenv("SPARCML_TRANSPORT"), logf: defaultLogger(os.Getenv("SPARCML_LOG"))}
	if d, err := parseDuration(os.Getenv("SPARCML_INIT_TIMEOUT")); err == nil && d > 0 {
		c.initTimeout = d
	}
	return c
}

// parseDuration accepts Go durations ("90s") and plain seconds ("90").
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(secs * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// WithRank sets this process's rank and the job size instead of reading
// them from the launcher's environment.
func WithRank(rank, size int) Option {
	return func(c *config) { c.rank, c.size = rank, size }
}

// WithAddr sets the rendezvous address (host:port of rank 0's store), as
// SPARCML_ADDR does.
func WithAddr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithToken sets the job secret every connection is authenticated with, as
// SPARCML_TOKEN does. All ranks must use the same token.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithInterface selects the network interface(s) to use, as SPARCML_IFNAME
// does (NCCL_SOCKET_IFNAME syntax: "eth0", "^docker,lo", "=ib0").
func WithInterface(ifname string) Option { return func(c *config) { c.ifname = ifname } }

// WithTransport selects "auto" (RDMA when a usable device exists on every
// rank, else TCP), "tcp" or "rdma", as SPARCML_TRANSPORT does.
func WithTransport(name string) Option { return func(c *config) { c.transport = name } }

// WithTimeout sets the default deadline of every operation whose context
// has none, as SPARCML_TIMEOUT does; 0 disables it. An operation gets at
// least d and at most d/64 (a second at most) more: operations started
// close together share one deadline (see deadline.go).
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout, c.timeoutSet = d, true }
}

// WithInitTimeout bounds Init (rendezvous and connection set-up) when ctx
// has no deadline; default 2 minutes.
func WithInitTimeout(d time.Duration) Option { return func(c *config) { c.initTimeout = d } }

// WithLogger sends the library's few log lines (interface and transport
// chosen, refused connections) to logf instead of stderr.
func WithLogger(logf func(format string, args ...any)) Option {
	return func(c *config) {
		if logf == nil {
			logf = func(string, ...any) {}
		}
		c.logf = logf
	}
}
