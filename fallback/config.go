package fallback

import (
	"fmt"
	"net"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// Defaults for the zero values of Config.
const (
	DefaultConnsPerPeer    = 1
	DefaultUnexpectedLimit = wire.DefaultUnexpectedLimit
	DefaultMaxMessage      = wire.DefaultMaxMessage
	DefaultPeerTimeout     = 30 * time.Second

	// CongestionAuto and CongestionSystem are the two policies of
	// Config.Congestion that name no algorithm.
	CongestionAuto   = "auto"
	CongestionSystem = "system"

	// maxConnsPerPeer bounds ConnsPerPeer: more connections than this
	// only add file descriptors and goroutines.
	maxConnsPerPeer = 64
)

// Config configures one rank's TCP transport.
type Config struct {
	// Rank and Size place this rank in the job.
	Rank, Size int
	// Store is the job's key-value store, used to publish this rank's
	// listen address (key "tcp/addr/<rank>") and learn the others'.
	// Not needed when Size is 1.
	Store bootstrap.Store
	// Token is the job secret; every connection is authenticated with it
	// (bootstrap.Authenticate) before anything else is exchanged.
	Token []byte
	// ListenIP is the address of the interface to listen on; nil means
	// 127.0.0.1. It is published as is, so it must be an address the
	// other ranks can reach, not an unspecified one (0.0.0.0 or ::).
	ListenIP net.IP
	// ConnsPerPeer is the number of TCP connections to each peer
	// (default 1). With more than one, messages are spread over them by
	// tag; one message always travels on one connection.
	ConnsPerPeer int
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF; the kernel caps it at
	// net.core.{w,r}mem_max. 0 (the default) leaves the sizes to the
	// kernel's autotuning, which grows them up to net.ipv4.tcp_{r,w}mem's
	// maximum: a fixed size at the usual rmem_max keeps the window below
	// what large messages need (compare with `sparcml bench --op p2p
	// --baseline` and large --sizes).
	SocketBuffer int
	// Congestion chooses the TCP congestion control of the connections;
	// empty means "auto" (the public API passes SPARCML_TCP_CONGESTION).
	// "auto": a connection between two addresses of this host whose
	// kernel default paces its sends (bbr) uses cubic instead (reno if
	// cubic is not there); every other connection keeps the kernel's
	// choice. Without an fq qdisc, a pacing algorithm sends the rest of a
	// large message from a timer, and on a busy host that timer fires
	// late, so that medium-sized round trips over loopback now and then
	// take several times as long (scripts/ab-p2p.sh alternating
	// SPARCML_TCP_CONGESTION=system with auto shows it; docs/DEFAULTS.md,
	// "Congestion control on loopback"). Pacing spares a network's queues, which a loopback
	// connection does not have.
	// "system" keeps the kernel's choice everywhere. Any other value is
	// the algorithm every connection must use (see
	// net.ipv4.tcp_available_congestion_control; an unprivileged process
	// may choose only from tcp_allowed_congestion_control).
	Congestion string
	// UnexpectedLimit is the per-peer budget of bytes of messages that
	// arrived before their receive was posted (default 64 MiB). When it
	// is exhausted the reader stops reading that peer until receives are
	// posted, so TCP flow control holds the sender back.
	UnexpectedLimit int64
	// MaxMessage is the largest payload accepted from a peer (default
	// 1<<34); a larger one is a protocol error. Sending a larger message
	// fails at once.
	MaxMessage int64
	// PeerTimeout bounds how long a peer may stay silent on the network
	// (not answering keepalive probes, not acknowledging data) before it
	// is declared lost (default 30s).
	PeerTimeout time.Duration
	// Log, if not nil, receives diagnostics such as refused connections
	// (subsystem logging.TCP).
	Log *logging.Logger
}

// withDefaults checks cfg and returns it with defaults filled in.
func (cfg Config) withDefaults() (Config, error) {
	invalid := func(format string, args ...any) (Config, error) {
		return cfg, fmt.Errorf("%w: tcp transport: rank %d: %s", transport.ErrInvalid, cfg.Rank, fmt.Sprintf(format, args...))
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return invalid("rank %d out of range for job size %d", cfg.Rank, cfg.Size)
	}
	if cfg.Size > 1 && cfg.Store == nil {
		return invalid("no store to exchange addresses through")
	}
	if len(cfg.Token) == 0 {
		return invalid("empty job token")
	}
	if cfg.ListenIP == nil {
		cfg.ListenIP = net.IPv4(127, 0, 0, 1)
	}
	if cfg.ListenIP.IsUnspecified() {
		return invalid("listen address %v is unspecified; give the interface address peers reach this rank at", cfg.ListenIP)
	}
	if cfg.ConnsPerPeer == 0 {
		cfg.ConnsPerPeer = DefaultConnsPerPeer
	}
	if cfg.ConnsPerPeer < 1 || cfg.ConnsPerPeer > maxConnsPerPeer {
		return invalid("ConnsPerPeer %d out of range [1,%d]", cfg.ConnsPerPeer, maxConnsPerPeer)
	}
	if cfg.SocketBuffer < 0 {
		return invalid("negative SocketBuffer %d", cfg.SocketBuffer)
	}
	if cfg.Congestion == "" {
		cfg.Congestion = CongestionAuto
	}
	if !validCongestion(cfg.Congestion) {
		return invalid("congestion control %q is not an algorithm's name (or auto, system)", cfg.Congestion)
	}
	limits, err := wire.Limits{UnexpectedLimit: cfg.UnexpectedLimit, MaxMessage: cfg.MaxMessage}.WithDefaults()
	if err != nil {
		return invalid("%v", err)
	}
	cfg.UnexpectedLimit, cfg.MaxMessage = limits.UnexpectedLimit, limits.MaxMessage
	if cfg.PeerTimeout == 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.PeerTimeout < time.Second {
		return invalid("PeerTimeout %v is below one second", cfg.PeerTimeout)
	}
	return cfg, nil
}
