package shm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// Defaults for the zero values of Config.
const (
	DefaultRingSize        = 1 << 20
	DefaultSingleCopyLimit = 64 << 10
	DefaultUnexpectedLimit = wire.DefaultUnexpectedLimit
	DefaultMaxMessage      = wire.DefaultMaxMessage
	DefaultSpin            = 50 * time.Microsecond
	DefaultKeyPrefix       = "shm"

	minRingSize = 64 << 10
	maxRingSize = 1 << 30
)

// ErrUnavailable is New's error where shared memory between processes is
// not supported (systems other than Linux).
var ErrUnavailable = errors.New("shm: shared-memory transport not available on this system")

// Config configures one rank's shared-memory transport.
type Config struct {
	// Rank and Size place this rank in the job. Ranks are the job's:
	// the transport serves only Peers, the ranks on this host.
	Rank, Size int
	// Peers are the ranks on this host and in this network namespace,
	// Rank among them; every one of them must give the same list. Send
	// and Recv accept only these ranks. Empty means every rank of the
	// job (a job on one host).
	Peers []int
	// Store is the job's key-value store, through which each rank
	// publishes the name of its rendezvous socket (key
	// "<KeyPrefix>/addr/<rank>"). Not needed when Peers is this rank
	// alone.
	Store bootstrap.Store
	// KeyPrefix prefixes the store keys, so that several transports of
	// one job do not collide (default "shm").
	KeyPrefix string
	// Token is the job secret; every connection between two ranks is
	// authenticated with it (bootstrap.Authenticate) before anything
	// else is exchanged.
	Token []byte
	// RingSize is the size in bytes of each ring a peer writes to this
	// rank (default 1 MiB; a power of two, at least 64 KiB). Each rank
	// maps one ring per peer on this host.
	RingSize int
	// SingleCopyLimit: messages larger than this are not copied through
	// the ring but read by the receiver straight from the sender's
	// buffers (process_vm_readv), once the receive is posted (default
	// 64 KiB). Where the kernel refuses such reads between two ranks,
	// their messages all go through the ring.
	SingleCopyLimit int
	// NoSingleCopy makes every message go through the ring, as where
	// the kernel refuses cross-process reads: for tests and for
	// comparing the two paths.
	NoSingleCopy bool
	// UnexpectedLimit is the per-peer budget of bytes of messages that
	// arrived through the ring before their receive was posted (default
	// 64 MiB). When it is spent this rank stops reading that peer's
	// ring, so the peer's sends wait once the ring is full. Single-copy
	// messages take none of it: they stay with the sender until their
	// receive is posted.
	UnexpectedLimit int64
	// MaxMessage is the largest payload accepted from a peer (default
	// 1<<34); a larger one is a protocol error. Sending a larger
	// message fails at once.
	MaxMessage int64
	// Spin is how long a waiting caller, and the progress goroutine
	// after its last work, poll the rings before they sleep; negative:
	// never. While a peer is active its messages are thus seen without
	// a system call on either side; once both sleep, a message costs the
	// sender one futex wake. The default is DefaultSpin, unless Peers
	// has more ranks than the host has CPUs: there the spinning ranks
	// would take the CPU from the ranks they wait for, and waiters sleep
	// at once (as Open MPI yields when oversubscribed). BenchmarkPingPong
	// with SHM_BENCH_SPIN compares the two.
	Spin time.Duration
	// Logf, if not nil, receives diagnostics: the set-up, the path
	// large messages take and why, lost peers.
	Logf func(format string, args ...any)
}

// withDefaults checks cfg and returns it with defaults filled in.
func (cfg Config) withDefaults() (Config, error) {
	invalid := func(format string, args ...any) (Config, error) {
		return cfg, fmt.Errorf("%w: shm transport: rank %d: %s", transport.ErrInvalid, cfg.Rank, fmt.Sprintf(format, args...))
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return invalid("rank %d out of range for job size %d", cfg.Rank, cfg.Size)
	}
	if len(cfg.Peers) == 0 {
		for r := range cfg.Size {
			cfg.Peers = append(cfg.Peers, r)
		}
	} else {
		cfg.Peers = slices.Clone(cfg.Peers)
		slices.Sort(cfg.Peers)
		if len(slices.Compact(slices.Clone(cfg.Peers))) != len(cfg.Peers) {
			return invalid("Peers %v lists a rank twice", cfg.Peers)
		}
		if cfg.Peers[0] < 0 || cfg.Peers[len(cfg.Peers)-1] >= cfg.Size {
			return invalid("Peers %v out of range for job size %d", cfg.Peers, cfg.Size)
		}
		if !slices.Contains(cfg.Peers, cfg.Rank) {
			return invalid("Peers %v does not list this rank", cfg.Peers)
		}
	}
	if len(cfg.Peers) > 1 && cfg.Store == nil {
		return invalid("no store to exchange socket names through")
	}
	if len(cfg.Token) == 0 {
		return invalid("empty job token")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.RingSize < minRingSize || cfg.RingSize > maxRingSize || cfg.RingSize&(cfg.RingSize-1) != 0 {
		return invalid("RingSize %d is not a power of two in [%d, %d]", cfg.RingSize, minRingSize, maxRingSize)
	}
	if cfg.SingleCopyLimit == 0 {
		cfg.SingleCopyLimit = DefaultSingleCopyLimit
	}
	if cfg.SingleCopyLimit < 0 {
		return invalid("negative SingleCopyLimit %d", cfg.SingleCopyLimit)
	}
	limits, err := wire.Limits{UnexpectedLimit: cfg.UnexpectedLimit, MaxMessage: cfg.MaxMessage}.WithDefaults()
	if err != nil {
		return invalid("%v", err)
	}
	cfg.UnexpectedLimit, cfg.MaxMessage = limits.UnexpectedLimit, limits.MaxMessage
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
		if onlineCPUs() < len(cfg.Peers) {
			cfg.Spin = -1
		}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return cfg, nil
}
