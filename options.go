package sparcml

import (
	"time"

	"github.com/sparcml/sparcml/internal/logging"
)

// Option adjusts Init, NewComm or Local. Options override the environment.
type Option func(*options)

// options are what the Options set; the zero value of each field (or its
// set flag) means "from the environment, else the default".
type options struct {
	rank, size     int // -1: not set
	addr           string
	token          string
	ifname         string
	transport      string
	timeout        time.Duration
	timeoutSet     bool
	initTimeout    time.Duration
	initTimeoutSet bool
	sink           logging.Sink
	sinkSet        bool
	onPeerLoss     string // "": SPARCML_ON_PEER_LOSS
}

func newOptions(opts []Option) options {
	o := options{rank: -1, size: -1}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithRank sets this process's rank and the job size instead of reading
// them from the launcher's environment.
func WithRank(rank, size int) Option {
	return func(o *options) { o.rank, o.size = rank, size }
}

// WithAddr sets the rendezvous address (host:port of rank 0's store), as
// SPARCML_ADDR does.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// WithToken sets the job secret every connection is authenticated with, as
// SPARCML_TOKEN does. All ranks must use the same token.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithInterface selects the network interface(s) to use, as SPARCML_IFNAME
// does (NCCL_SOCKET_IFNAME syntax: "eth0", "^docker,lo", "=ib0").
func WithInterface(ifname string) Option { return func(o *options) { o.ifname = ifname } }

// WithTransport selects the transports, as SPARCML_TRANSPORT does:
// "auto" (shared memory between the ranks of a host; between hosts RDMA
// when a usable device exists on every rank, else TCP), "shm" (shared
// memory only: Init fails unless every rank is on one host), "tcp" or
// "rdma" (that transport between every pair of ranks). Rank 0's choice
// holds for the whole job.
func WithTransport(name string) Option { return func(o *options) { o.transport = name } }

// WithTimeout sets the default deadline of every operation whose context
// has none, as SPARCML_TIMEOUT does; 0 disables it. An operation gets at
// least d and at most d/64 (a second at most) more: operations started
// close together share one deadline, which spares a timer per operation.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// WithInitTimeout bounds Init (rendezvous and connection set-up) when ctx
// has no deadline, as SPARCML_INIT_TIMEOUT does (default 2 minutes); 0
// leaves Init bounded by ctx alone.
func WithInitTimeout(d time.Duration) Option {
	return func(o *options) { o.initTimeout, o.initTimeoutSet = d, true }
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
