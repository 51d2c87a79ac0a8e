package sparcml

import (
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/startup"
)

// Option adjusts Init, NewComm or Local. Options override the environment.
type Option func(*options)

// options are what the Options set: Init's (startup.Options) and the
// logger's.
type options struct {
	startup.Options
	sink    logging.Sink
	sinkSet bool
}

func newOptions(opts []Option) options {
	o := options{Options: startup.Options{Rank: -1, Size: -1}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithRank sets this process's rank and the job size instead of reading
// them from the launcher's environment.
func WithRank(rank, size int) Option {
	return func(o *options) { o.Rank, o.Size = rank, size }
}

// WithAddr sets the rendezvous address (host:port of rank 0's store), as
// SPARCML_ADDR does.
func WithAddr(addr string) Option { return func(o *options) { o.Addr = addr } }

// WithToken sets the job secret every connection is authenticated with, as
// SPARCML_TOKEN does. All ranks must use the same token.
func WithToken(token string) Option { return func(o *options) { o.Token = token } }

// WithInterface selects the network interface(s) to use, as SPARCML_IFNAME
// does (NCCL_SOCKET_IFNAME syntax: "eth0", "^docker,lo", "=ib0").
func WithInterface(ifname string) Option { return func(o *options) { o.IfName = ifname } }

// WithTransport selects the transports, as SPARCML_TRANSPORT does:
// "auto" (shared memory between the ranks of a host; between hosts RDMA
// when a usable device exists on every rank, else TCP), "shm" (shared
// memory only: Init fails unless every rank is on one host), "tcp" or
// "rdma" (that transport between every pair of ranks). Rank 0's choice
// holds for the whole job.
func WithTransport(name string) Option { return func(o *options) { o.Transport = name } }

// WithTimeout sets the default deadline of every operation whose context
// has none, as SPARCML_TIMEOUT does; 0 disables it. An operation gets at
// least d and at most d/64 (a second at most) more: operations started
// close together share one deadline, which spares a timer per operation.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.Timeout, o.TimeoutSet = d, true }
}

// WithInitTimeout bounds Init (rendezvous and connection set-up) when ctx
// has no deadline, as SPARCML_INIT_TIMEOUT does (default 2 minutes); 0
// leaves Init bounded by ctx alone.
func WithInitTimeout(d time.Duration) Option {
	return func(o *options) { o.InitTimeout, o.InitTimeoutSet = d, true }
}

// WithLogger sends the library's log lines to logf instead of stderr, one
// call per line, as logf("%s", line), each line already prefixed with
// host, pid and rank ("node1:4242 [3] sparcml WARN tcp: ..."), so
// log.Printf and testing.T.Logf fit. Which lines are written is still
// chosen by SPARCML_DEBUG and SPARCML_DEBUG_SUBSYS (default: the start-up
// line of rank 0 and warnings). A nil logf discards every line.
func WithLogger(logf func(format string, args ...any)) Option {
	return func(o *options) {
		o.sink, o.sinkSet = nil, true
		if logf != nil {
			o.sink = logging.PrintfSink(logf)
		}
	}
}
