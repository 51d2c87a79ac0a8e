package sparcml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
)

// Init joins the job this process belongs to: it reads rank, size,
// rendezvous address and token from the launcher's environment (see the
// README's table of variables) unless options give them, meets the other
// ranks through rank 0's store, and connects the transport. It returns
// when every rank is connected, or fails with an error that says what was
// missing or unreachable; an invalid value of any SPARCML_* variable is
// such an error, naming the variable.
//
// A process started without any launcher (no rank and size in its
// environment, and no SPARCML_ADDR) gets a one-rank communicator, as an
// MPI program started without mpirun does; an incomplete launcher
// environment, such as a rank without a size, is an error.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	started := time.Now()
	s, err := config.Load(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("sparcml: %w", err)
	}
	o := newOptions(opts)
	log := newLogger(o, s)
	env, err := resolveEnv(o, s)
	if err != nil {
		return nil, err
	}
	log = log.WithRank(env.Rank)
	if env.Rank == 0 {
		logSettings(log, s)
	}
	if env.Launcher == launcherNone {
		log.Infof(logging.Init, "no launcher environment (%s): running as a one-rank job", noLauncherHint)
	}
	initTimeout := s.InitTimeout
	if o.initTimeoutSet {
		initTimeout = o.initTimeout
	}
	if _, has := ctx.Deadline(); has {
		initTimeout = 0 // the caller's deadline, not the variable, bounds Init
	} else if initTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, initTimeout)
		defer cancel()
	}
	if env.Rank == 0 && strings.Contains(env.TokenSource, "not secret") {
		log.Warnf(logging.Init, "SPARCML_TOKEN is not set; every rank uses a token %s", env.TokenSource)
	}
	var store bootstrap.Store
	if env.Size > 1 {
		if store, err = bootstrap.Connect(ctx, env, log); err != nil {
			return nil, launchFailure(ctx, fmt.Errorf("sparcml: %w", err), env.Rank, nil, initTimeout)
		}
	}
	ctx, cancelInit := context.WithCancelCause(ctx)
	defer cancelInit(nil)
	stopWatch := bootstrap.OnLaunchFailure(store, cancelInit)
	topo := oneHost(env.Size)
	if env.Size > 1 {
		hosts, err := bootstrap.ExchangeHosts(ctx, store, env.Rank, env.Size, bootstrap.HostKey())
		if err != nil {
			stopWatch()
			return nil, failInit(ctx, fmt.Errorf("sparcml: rank %d: %w", env.Rank, err), env.Rank, store, initTimeout)
		}
		topo = newTopology(hosts)
	}
	t, err := connectTransport(ctx, o, s, env, store, topo, log)
	stopWatch()
	if err == nil {
		// A death during another rank's set-up is the launch's failure:
		// wait for every set-up, so this rank names it too.
		if err = bootstrap.AwaitReady(ctx, store); err != nil {
			t.Close()
		}
	}
	if err != nil {
		return nil, failInit(ctx, err, env.Rank, store, initTimeout)
	}
	c := newComm(t, env.Timeout, log)
	c.plans.every = s.SparseAgreeEvery
	c.store = store
	c.topo, c.sys.topo = topo, topo
	c.startDiag(s, store)
	if err := c.setPeerLoss(o, s); err != nil {
		c.Close()
		return nil, err
	}
	if s.Calibrate {
		if err := c.calibrate(ctx); err != nil {
			if lostElsewhere(err) {
				c.failBeforeClose(err) // the peers hear the cause from this rank's goodbye
			}
			c.Close()
			return nil, err
		}
	}
	if env.Rank == 0 {
		m := c.model
		log.Infof(logging.Init, "cost model: alpha %.1f us, beta %.2f GB/s, dense reduce %.2f GB/s, sparse merge %.2f GB/s, index codec %.1f ns/index (%s)",
			m.Alpha*1e6, 1e-9/m.Beta, 1e-9/m.Gamma, 1e-9/m.SparseGamma, m.IndexCodec*1e9, calibrationSource(s, env, topo))
		if m.LocalBeta > 0 {
			log.Infof(logging.Init, "cost model within host 0 (ranks 0 and %d): alpha %.1f us, beta %.2f GB/s",
				calibrationPeers(topo)[1], m.LocalAlpha*1e6, 1e-9/m.LocalBeta)
		}
		log.Versionf("version %s: %d rank%s, transport %s, launcher %s, ready in %v",
			buildVersion(), env.Size, plural(env.Size), t.Name(), env.Launcher, time.Since(started).Round(time.Millisecond))
	}
	return c, nil
}

// launcherNone is the launcher of a process started on its own.
const launcherNone = "none"

const noLauncherHint = "start it with sparcml run, torchrun, mpirun or srun to join a job"

// resolveEnv merges the launcher's environment with explicit options.
func resolveEnv(o options, s *config.Settings) (bootstrap.Env, error) {
	own := bootstrap.Settings{Rank: s.Rank, Size: s.Size, Addr: s.Addr, Token: s.Token,
		Port: s.Port, IfName: s.IfName, Timeout: s.Timeout}
	env, envErr := bootstrap.FromEnv(own, os.Getenv)
	switch {
	case o.rank >= 0 || o.size >= 0:
		if envErr != nil {
			// Options stand in for the launcher; keep what the
			// environment could still say (token, timeout, interface).
			env = bootstrap.Env{Launcher: "options", Addr: s.Addr, IfName: s.IfName, Timeout: s.Timeout}
			if s.Token != "" {
				env.Token, env.TokenSource = []byte(s.Token), "SPARCML_TOKEN"
			}
		}
		env.Rank, env.Size = o.rank, o.size
	case errors.Is(envErr, bootstrap.ErrNoLauncher) && s.Addr == "" && o.addr == "":
		env = bootstrap.Env{Launcher: launcherNone, Rank: 0, Size: 1, IfName: s.IfName, Timeout: s.Timeout}
	case errors.Is(envErr, bootstrap.ErrNoLauncher):
		return env, fmt.Errorf("sparcml: a rendezvous address is set (SPARCML_ADDR or WithAddr) but not this process's rank and size: %w", envErr)
	case envErr != nil:
		return env, fmt.Errorf("sparcml: %w", envErr)
	}
	if o.addr != "" {
		env.Addr, env.AddrSource = o.addr, "WithAddr"
	}
	if o.token != "" {
		env.Token, env.TokenSource = []byte(o.token), "WithToken"
	}
	if o.ifname != "" {
		env.IfName = o.ifname
	}
	if o.timeoutSet {
		env.Timeout = o.timeout
	}
	if env.Size == 1 && env.Rank == 0 {
		// A one-rank job needs no rendezvous; its transport still wants
		// a token, which nobody else needs to know.
		if len(env.Token) == 0 {
			env.Token, env.TokenSource = []byte(bootstrap.NewToken()), "generated for a one-rank job"
		}
		if env.Timeout < 0 {
			return env, fmt.Errorf("sparcml: %w: negative timeout %v", ErrInvalid, env.Timeout)
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

// calibrationSource says where the cost model's figures came from.
func calibrationSource(s *config.Settings, env bootstrap.Env, topo topology) string {
	switch {
	case !s.Calibrate:
		return "defaults: SPARCML_CALIBRATE=0"
	case env.Size == 1:
		return "defaults: one rank"
	}
	peer := calibrationPeers(topo)[0]
	where := "on one host"
	if topo.hostOf[peer] != topo.hostOf[0] {
		where = fmt.Sprintf("hosts %d and %d", topo.hostOf[0], topo.hostOf[peer])
	}
	return fmt.Sprintf("measured at start-up between ranks 0 and %d, %s", peer, where)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
