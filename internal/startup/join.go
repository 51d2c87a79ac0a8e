// Package startup is the wiring of Init: it resolves the launcher's
// environment and the options, meets the other ranks through rank 0's
// store, learns which host every rank runs on, chooses and connects the
// transports (shared memory within a host, TCP or RDMA between hosts),
// calibrates the cost model, and names the cause of a broken launch.
package startup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/topology"
	"github.com/sparcml/sparcml/transport"
)

// Options are what the public API's options set for Init; the zero value
// of each field (or its set flag) means "from the environment, else the
// default".
type Options struct {
	Rank, Size     int // -1: not set
	Addr           string
	Token          string
	IfName         string
	Transport      string
	Timeout        time.Duration
	TimeoutSet     bool
	InitTimeout    time.Duration
	InitTimeoutSet bool
	OnPeerLoss     string // "": SPARCML_ON_PEER_LOSS
}

// Job is a rank's place in a job once Join has connected it.
type Job struct {
	Env   bootstrap.Env
	Store bootstrap.Store // nil for a one-rank job
	Topo  topology.Topology
	T     transport.Transport
	Log   *logging.Logger // tagged with the rank
}

// InitTimeout is what bounds Init when ctx has no deadline (0: nothing
// but ctx).
func InitTimeout(ctx context.Context, o Options, s *config.Settings) time.Duration {
	if _, has := ctx.Deadline(); has {
		return 0 // the caller's deadline, not the variable, bounds Init
	}
	if o.InitTimeoutSet {
		return o.InitTimeout
	}
	return s.InitTimeout
}

// Process is what Join reads of the process's environment, given by the
// public API so that no package below it reads the environment itself:
// Getenv for the launchers' variables, Environ (NAME=value) to warn of
// SPARCML_* names that config does not declare.
type Process struct {
	Getenv  func(string) string
	Environ []string
}

// Join resolves this rank's environment, meets the other ranks through
// rank 0's store, learns their hosts and connects the transports.
// initTimeout (InitTimeout) is only named in errors: ctx is already
// bounded by it.
func Join(ctx context.Context, o Options, s *config.Settings, p Process, initTimeout time.Duration, log *logging.Logger) (*Job, error) {
	env, err := ResolveEnv(o, s, p.Getenv)
	if err != nil {
		return nil, err
	}
	log = log.WithRank(env.Rank)
	if env.Rank == 0 {
		logSettings(log, s)
		for _, w := range config.Unknown(p.Environ) {
			log.Warnf(logging.Env, "%s", w)
		}
	}
	if env.Launcher == launcherNone {
		log.Infof(logging.Init, "no launcher environment (%s): running as a one-rank job", noLauncherHint)
	}
	if env.Rank == 0 && strings.Contains(env.TokenSource, "not secret") {
		log.Warnf(logging.Init, "SPARCML_TOKEN is not set; every rank uses a token %s", env.TokenSource)
	}
	var store bootstrap.Store
	if env.Size > 1 {
		if store, err = bootstrap.Connect(ctx, env, log); err != nil {
			return nil, LaunchFailure(ctx, fmt.Errorf("sparcml: %w", err), env.Rank, nil, initTimeout)
		}
	}
	ctx, cancelInit := context.WithCancelCause(ctx)
	defer cancelInit(nil)
	stopWatch := bootstrap.OnLaunchFailure(store, cancelInit)
	topo := topology.OneHost(env.Size)
	if env.Size > 1 {
		hosts, err := bootstrap.ExchangeHosts(ctx, store, env.Rank, env.Size, bootstrap.HostKey())
		if err != nil {
			stopWatch()
			return nil, FailInit(ctx, fmt.Errorf("sparcml: rank %d: %w", env.Rank, err), env.Rank, store, initTimeout)
		}
		topo = topology.New(hosts)
	}
	t, err := ConnectTransport(ctx, o, s, env, store, topo, log)
	stopWatch()
	if err == nil {
		// A death during another rank's set-up is the launch's failure:
		// wait for every set-up, so this rank names it too.
		if err = bootstrap.AwaitReady(ctx, store); err != nil {
			t.Close()
		}
	}
	if err != nil {
		return nil, FailInit(ctx, err, env.Rank, store, initTimeout)
	}
	return &Job{Env: env, Store: store, Topo: topo, T: t, Log: log}, nil
}

// launcherNone is the launcher of a process started on its own.
const launcherNone = "none"

const noLauncherHint = "start it with sparcml run, torchrun, mpirun or srun to join a job"

// ResolveEnv merges the launcher's environment, read through getenv,
// with explicit options.
func ResolveEnv(o Options, s *config.Settings, getenv func(string) string) (bootstrap.Env, error) {
	own := bootstrap.Settings{Rank: s.Rank, Size: s.Size, Addr: s.Addr, Token: s.Token,
		Port: s.Port, IfName: s.IfName, Timeout: s.Timeout}
	env, envErr := bootstrap.FromEnv(own, getenv)
	switch {
	case o.Rank >= 0 || o.Size >= 0:
		if envErr != nil {
			// Options stand in for the launcher; keep what the
			// environment could still say (token, timeout, interface).
			env = bootstrap.Env{Launcher: "options", Addr: s.Addr, IfName: s.IfName, Timeout: s.Timeout}
			if s.Token != "" {
				env.Token, env.TokenSource = []byte(s.Token), "SPARCML_TOKEN"
			}
		}
		env.Rank, env.Size = o.Rank, o.Size
	case errors.Is(envErr, bootstrap.ErrNoLauncher) && s.Addr == "" && o.Addr == "":
		env = bootstrap.Env{Launcher: launcherNone, Rank: 0, Size: 1, IfName: s.IfName, Timeout: s.Timeout}
	case errors.Is(envErr, bootstrap.ErrNoLauncher):
		return env, fmt.Errorf("sparcml: a rendezvous address is set (SPARCML_ADDR or WithAddr) but not this process's rank and size: %w", envErr)
	case envErr != nil:
		return env, fmt.Errorf("sparcml: %w", envErr)
	}
	if o.Addr != "" {
		env.Addr, env.AddrSource = o.Addr, "WithAddr"
	}
	if o.Token != "" {
		env.Token, env.TokenSource = []byte(o.Token), "WithToken"
	}
	if o.IfName != "" {
		env.IfName = o.IfName
	}
	if o.TimeoutSet {
		env.Timeout = o.Timeout
	}
	if env.Size == 1 && env.Rank == 0 {
		// A one-rank job needs no rendezvous; its transport still wants
		// a token, which nobody else needs to know.
		if len(env.Token) == 0 {
			env.Token, env.TokenSource = []byte(bootstrap.NewToken()), "generated for a one-rank job"
		}
		if env.Timeout < 0 {
			return env, fmt.Errorf("sparcml: %w: negative timeout %v", transport.ErrInvalid, env.Timeout)
		}
		return env, nil
	}
	if err := env.Validate(); err != nil {
		return env, fmt.Errorf("sparcml: %w", err)
	}
	return env, nil
}

// logSettings says, once per job (on rank 0), which variables were set.
func logSettings(log *logging.Logger, s *config.Settings) {
	if set := s.SetVars(); len(set) > 0 {
		log.Infof(logging.Env, "%s", strings.Join(set, " "))
	} else {
		log.Infof(logging.Env, "no SPARCML_* variable set: defaults everywhere")
	}
}

// LogReady logs, on rank 0, the cost model and where its figures came
// from, then the start-up line: version, ranks, transport, launcher and
// the time Init took.
func LogReady(job *Job, s *config.Settings, m collectives.CostModel, version string, took time.Duration) {
	env, topo, log := job.Env, job.Topo, job.Log
	if env.Rank != 0 {
		return
	}
	log.Infof(logging.Init, "cost model: alpha %.1f us, beta %.2f GB/s, dense reduce %.2f GB/s, sparse merge %.2f GB/s, index codec %.1f ns/index (%s)",
		m.Alpha*1e6, 1e-9/m.Beta, 1e-9/m.Gamma, 1e-9/m.SparseGamma, m.IndexCodec*1e9, calibrationSource(s, env, topo))
	if m.LocalBeta > 0 {
		log.Infof(logging.Init, "cost model within host 0 (ranks 0 and %d): alpha %.1f us, beta %.2f GB/s",
			CalibrationPeers(topo)[1], m.LocalAlpha*1e6, 1e-9/m.LocalBeta)
	}
	log.Versionf("version %s: %d rank%s, transport %s, launcher %s, ready in %v",
		version, env.Size, topology.Plural(env.Size), job.T.Name(), env.Launcher, took.Round(time.Millisecond))
}

// calibrationSource says where the cost model's figures came from.
func calibrationSource(s *config.Settings, env bootstrap.Env, topo topology.Topology) string {
	switch {
	case !s.Calibrate:
		return "defaults: SPARCML_CALIBRATE=0"
	case env.Size == 1:
		return "defaults: one rank"
	}
	peer := CalibrationPeers(topo)[0]
	where := "on one host"
	if topo.HostOf[peer] != topo.HostOf[0] {
		where = fmt.Sprintf("hosts %d and %d", topo.HostOf[0], topo.HostOf[peer])
	}
	return fmt.Sprintf("measured at start-up between ranks 0 and %d, %s", peer, where)
}
