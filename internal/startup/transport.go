package startup

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/sparcml/sparcml/fallback"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/shm"
	"github.com/sparcml/sparcml/internal/topology"
	"github.com/sparcml/sparcml/transport"
)

// PeerLossMode is WithOnPeerLoss's mode, else SPARCML_ON_PEER_LOSS's.
func PeerLossMode(o Options, s *config.Settings) string {
	if o.OnPeerLoss != "" {
		return strings.ToLower(o.OnPeerLoss)
	}
	return s.OnPeerLoss
}

// TransportNames lists the values WithTransport and SPARCML_TRANSPORT
// accept: "auto", "shm", "tcp", "rdma".
func TransportNames() []string { return slices.Clone(transportModes) }

// ParseTransport checks a transport name for WithTransport, ignoring case;
// the empty string (the environment's choice, SPARCML_TRANSPORT) is valid.
func ParseTransport(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, _, err := transportMode(Options{Transport: s}); err != nil {
		return "", err
	}
	return strings.ToLower(s), nil
}

// transportModes are the values of SPARCML_TRANSPORT and WithTransport.
var transportModes = []string{"auto", "shm", "tcp", "rdma"}

// shmSupported: the shared-memory transport exists on Linux only.
const shmSupported = runtime.GOOS == "linux"

// plan is the job's choice of transports, made by rank 0 and followed by
// every rank: shared memory between the ranks of each host (local) and
// one transport between hosts (remote).
type plan struct {
	mode   string // what rank 0 was asked: auto, shm, tcp or rdma
	local  bool   // ranks of one host share memory
	remote string // "tcp" or "rdma" between hosts (and everywhere if !local); "" if none is needed
	why    string // rank 0's reason, for its log line
}

// transportMode is the mode asked for, by WithTransport or else
// SPARCML_TRANSPORT, and who asked, for errors.
func transportMode(o Options) (mode, source string, err error) {
	if o.Transport == "" {
		return "", "SPARCML_TRANSPORT", nil
	}
	mode = strings.ToLower(o.Transport)
	if !slices.Contains(transportModes, mode) {
		return "", "", fmt.Errorf("sparcml: %w: WithTransport(%q): unknown transport (want %s)", transport.ErrInvalid, o.Transport, strings.Join(transportModes, ", "))
	}
	return mode, "WithTransport", nil
}

// ConnectTransport agrees on the transports with every rank and connects
// them: shared memory to the ranks of this host, TCP or RDMA to the
// others, a transport.Route when there are both.
func ConnectTransport(ctx context.Context, o Options, s *config.Settings, env bootstrap.Env, store bootstrap.Store, topo topology.Topology, log *logging.Logger) (transport.Transport, error) {
	mode, source, err := transportMode(o)
	if err != nil {
		return nil, err
	}
	if mode == "" {
		mode = s.Transport
	}
	if mode == "auto" && PeerLossMode(o, s) == "revoke" {
		// Only TCP survives a lost peer (the public API's WithOnPeerLoss).
		mode, source = "tcp", "SPARCML_ON_PEER_LOSS=revoke"
	}
	inJob := func(err error) error { return fmt.Errorf("sparcml: rank %d: %w", env.Rank, err) }
	p, err := agreeTransport(ctx, env, store, topo, mode, source)
	if err != nil {
		return nil, inJob(err)
	}
	local := topo.RanksOn(topo.HostOf[env.Rank])
	var parts []transport.Transport
	closeAll := func() {
		for _, t := range parts {
			t.Close()
		}
	}
	via := make([]int, env.Size)
	if p.local && (len(local) > 1 || p.remote == "") {
		t, err := shm.New(ctx, shm.Config{Rank: env.Rank, Size: env.Size, Peers: local, Store: store, Token: env.Token,
			Logf: func(format string, args ...any) { log.Infof(logging.Net, format, args...) }})
		if err != nil {
			return nil, fmt.Errorf("sparcml: %w", err)
		}
		parts = append(parts, t)
	}
	if p.remote != "" && (!p.local || len(local) < env.Size) {
		t, err := connectRemote(ctx, p.remote, s, env, store, log)
		if err != nil {
			closeAll()
			return nil, err
		}
		for r := range via {
			if !p.local || !slices.Contains(local, r) {
				via[r] = len(parts)
			}
		}
		parts = append(parts, t)
	}
	logRoutes(log, env, p, parts, via)
	if len(parts) == 1 {
		return parts[0], nil
	}
	rt, err := transport.NewRoute(parts, via)
	if err != nil {
		closeAll()
		return nil, inJob(err)
	}
	return rt, nil
}

// connectRemote connects the transport between hosts, over the chosen
// interface: RDMA or TCP, a full mesh.
func connectRemote(ctx context.Context, name string, s *config.Settings, env bootstrap.Env, store bootstrap.Store, log *logging.Logger) (transport.Transport, error) {
	inJob := func(err error) error { return fmt.Errorf("sparcml: rank %d: %w", env.Rank, err) }
	var ip []byte
	if env.Size > 1 {
		addr, iface, err := bootstrap.ChooseAddr(env.IfName, env.Addr)
		if err != nil {
			return nil, inJob(fmt.Errorf("choose network interface: %w", err))
		}
		ip = addr
		log.Infof(logging.Net, "interface %s (%s)", iface, addr)
	}
	if name == "rdma" {
		t, err := newRDMA(ctx, s, env, store, log)
		if err != nil {
			return nil, inJob(err)
		}
		return t, nil
	}
	// The TCP transport's set-up errors name this rank already ("tcp:
	// rank 2: ..."): they get the package prefix only.
	t, err := fallback.New(ctx, fallback.Config{
		Rank: env.Rank, Size: env.Size, Store: store, Token: env.Token,
		ListenIP: ip, Congestion: s.TCPCongestion, Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("sparcml: %w", err)
	}
	return t, nil
}

// logRoutes says once, at INFO, which transport reaches which ranks:
// "transport shm to ranks 1-3, tcp to ranks 4-7" (rank 0 adds why).
func logRoutes(log *logging.Logger, env bootstrap.Env, p plan, parts []transport.Transport, via []int) {
	var to []string
	for i, t := range parts {
		var ranks []int
		for r, v := range via {
			if v == i && r != env.Rank {
				ranks = append(ranks, r)
			}
		}
		if len(ranks) > 0 {
			to = append(to, fmt.Sprintf("%s to rank%s %s", t.Name(), topology.Plural(len(ranks)), topology.RankRanges(ranks)))
		}
	}
	if len(to) == 0 {
		to = append(to, parts[0].Name()+" (no peers)")
	}
	line := "transport " + strings.Join(to, ", ")
	if env.Rank == 0 {
		line += " (" + p.why + ")"
	}
	log.Infof(logging.Init, "%s", line)
}

// agreeTransport: rank 0 decides from its mode, the hosts and what every
// rank can do, and publishes the plan; every rank follows it, so a job
// whose ranks were given different modes still agrees. Each rank
// publishes whether it can do RDMA, when that may matter.
func agreeTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, topo topology.Topology, mode, source string) (plan, error) {
	if env.Size == 1 {
		return decide(ctx, env, topo, mode, source, func(int) (string, error) { return canRDMA(mode, topo), nil })
	}
	if err := store.Set(ctx, fmt.Sprintf("transport/can-rdma/%d", env.Rank), []byte(canRDMA(mode, topo))); err != nil {
		return plan{}, err
	}
	if env.Rank == 0 {
		p, err := decide(ctx, env, topo, mode, source, func(r int) (string, error) {
			v, err := store.Get(ctx, fmt.Sprintf("transport/can-rdma/%d", r))
			return string(v), err
		})
		v := encodePlan(p)
		if err != nil {
			if errors.Is(err, ctx.Err()) {
				return plan{}, err
			}
			v = "error: " + err.Error()
		}
		if err := store.Set(ctx, "transport/chosen", []byte(v)); err != nil {
			return plan{}, err
		}
	}
	v, err := store.Get(ctx, "transport/chosen")
	if err != nil {
		return plan{}, err
	}
	if msg, failed := strings.CutPrefix(string(v), "error: "); failed {
		return plan{}, errors.New(msg)
	}
	return decodePlan(string(v))
}

// canRDMA is what a rank publishes: "yes", or "no: why".
func canRDMA(mode string, topo topology.Topology) string {
	if mode != "rdma" && (mode != "auto" || topo.Hosts < 2) {
		return "no: not needed with transport " + mode
	}
	if err := rdmaAvailable(); err != nil {
		return "no: " + err.Error()
	}
	return "yes"
}

// decide is rank 0's choice; can(r) is rank r's canRDMA.
func decide(ctx context.Context, env bootstrap.Env, topo topology.Topology, mode, source string, can func(r int) (string, error)) (plan, error) {
	p := plan{mode: mode}
	allRDMA := func() (bool, string, error) {
		for r := 0; r < env.Size; r++ {
			v, err := can(r)
			if err != nil {
				return false, "", err
			}
			if v != "yes" {
				return false, fmt.Sprintf("%s (on rank %d)", strings.TrimPrefix(v, "no: "), r), nil
			}
		}
		return true, "", nil
	}
	switch mode {
	case "tcp":
		p.remote, p.why = "tcp", source+"=tcp"
	case "rdma":
		ok, why, err := allRDMA()
		if err != nil || !ok {
			return p, errors.Join(err, errorIf(!ok, why))
		}
		p.remote, p.why = "rdma", source+"=rdma"
	case "shm":
		if !shmSupported {
			return p, fmt.Errorf("%s=shm: %w", source, shm.ErrUnavailable)
		}
		if topo.Hosts > 1 {
			return p, fmt.Errorf("%s=shm needs every rank on one host, but the job runs on %d: %s", source, topo.Hosts, topo.Describe())
		}
		p.local, p.why = true, source+"=shm"
	default: // auto
		p.local = shmSupported && env.Size > 1
		switch {
		case topo.Hosts == 1 && p.local:
			p.why = "auto: one host"
		case topo.Hosts == 1:
			p.remote, p.why = "tcp", "auto: no shared memory here"
		default:
			ok, why, err := allRDMA()
			if err != nil {
				return p, err
			}
			p.remote = "tcp"
			p.why = fmt.Sprintf("auto: %d hosts; not RDMA: %s", topo.Hosts, why)
			if ok {
				p.remote, p.why = "rdma", fmt.Sprintf("auto: %d hosts, every rank has a usable RDMA device", topo.Hosts)
			}
		}
	}
	return p, nil
}

func errorIf(cond bool, msg string) error {
	if !cond {
		return nil
	}
	return errors.New(msg)
}

// encodePlan and decodePlan carry rank 0's plan through the store:
// "mode local remote why".
func encodePlan(p plan) string {
	local, remote := "-", "-"
	if p.local {
		local = "shm"
	}
	if p.remote != "" {
		remote = p.remote
	}
	return strings.Join([]string{p.mode, local, remote, p.why}, " ")
}

func decodePlan(v string) (plan, error) {
	f := strings.SplitN(v, " ", 4)
	if len(f) < 4 {
		return plan{}, fmt.Errorf("rank 0 published an unreadable transport plan %q", v)
	}
	p := plan{mode: f[0], local: f[1] == "shm", remote: f[2], why: f[3]}
	if p.remote == "-" {
		p.remote = ""
	}
	return p, nil
}
