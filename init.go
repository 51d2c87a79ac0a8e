package sparcml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sparcml/sparcml/bootstrap"
	"github.com/sparcml/sparcml/fallback"
	"github.com/sparcml/sparcml/transport"
)

// Init joins the job this process belongs to: it reads rank, size,
// rendezvous address and token from the launcher's environment (see the
// README's table of variables) unless options give them, meets the other
// ranks through rank 0's store, and connects the transport. It returns
// when every rank is connected, or fails with an error that says what was
// missing or unreachable.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	env, err := resolveEnv(cfg)
	if err != nil {
		return nil, err
	}
	if _, has := ctx.Deadline(); !has && cfg.initTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.initTimeout)
		defer cancel()
	}
	logf := cfg.logf
	if strings.Contains(env.TokenSource, "not secret") {
		logf("rank %d: warning: SPARCML_TOKEN is not set; using a token %s", env.Rank, env.TokenSource)
	}
	store, err := bootstrap.Connect(ctx, env, logf)
	if err != nil {
		return nil, fmt.Errorf("sparcml: %w", err)
	}
	t, err := connectTransport(ctx, cfg, env, store, logf)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("sparcml: rank %d: %w", env.Rank, err)
	}
	c := newComm(t, env.Timeout, logf)
	c.store = store
	if err := c.calibrate(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("sparcml: rank %d: %w", env.Rank, err)
	}
	if env.Rank == 0 {
		m := c.model
		logf("cost model: alpha %.1f us, beta %.2f GB/s, dense reduce %.2f GB/s, sparse merge %.2f GB/s",
			m.Alpha*1e6, 1e-9/m.Beta, 1e-9/m.Gamma, 1e-9/m.SparseGamma)
	}
	return c, nil
}

// resolveEnv merges the launcher's environment with explicit options.
func resolveEnv(cfg config) (bootstrap.Env, error) {
	env, envErr := bootstrap.FromEnv(os.Getenv)
	if cfg.rank >= 0 || cfg.size >= 0 {
		if envErr != nil {
			// Options stand in for the launcher; keep what the
			// environment could still say (token, timeout, interface).
			env = bootstrap.Env{Launcher: "options", Timeout: 5 * time.Minute}
			env.Addr = os.Getenv("SPARCML_ADDR")
			if tok := os.Getenv("SPARCML_TOKEN"); tok != "" {
				env.Token, env.TokenSource = []byte(tok), "SPARCML_TOKEN"
			}
			env.IfName = os.Getenv("SPARCML_IFNAME")
			envErr = nil
		}
		env.Rank, env.Size = cfg.rank, cfg.size
	}
	if envErr != nil {
		return env, fmt.Errorf("sparcml: %w", envErr)
	}
	if cfg.addr != "" {
		env.Addr = cfg.addr
	}
	if cfg.token != "" {
		env.Token, env.TokenSource = []byte(cfg.token), "option"
	}
	if cfg.ifname != "" {
		env.IfName = cfg.ifname
	}
	if cfg.timeoutSet {
		env.Timeout = cfg.timeout
	}
	if err := env.Validate(); err != nil {
		return env, fmt.Errorf("sparcml: %w", err)
	}
	return env, nil
}

// connectTransport agrees on a transport with every rank (rank 0 decides
// from what each rank can do, so a job never mixes transports) and
// connects it.
func connectTransport(ctx context.Context, cfg config, env bootstrap.Env, store bootstrap.Store, logf func(string, ...any)) (transport.Transport, error) {
	want := strings.ToLower(cfg.transport)
	if want == "" {
		want = "auto"
	}
	if want != "auto" && want != "tcp" && want != "rdma" {
		return nil, fmt.Errorf("%w: unknown transport %q (want auto, tcp or rdma)", ErrInvalid, cfg.transport)
	}
	chosen, err := agreeTransport(ctx, env, store, want)
	if err != nil {
		return nil, err
	}
	ip, iface, err := bootstrap.ChooseAddr(env.IfName, env.Addr)
	if err != nil {
		return nil, fmt.Errorf("choose network interface: %w", err)
	}
	logf("rank %d/%d: transport %s, interface %s (%s), launcher %s", env.Rank, env.Size, chosen, iface, ip, env.Launcher)
	switch chosen {
	case "rdma":
		return newRDMA(ctx, env, store, logf)
	default:
		return fallback.New(ctx, fallback.Config{
			Rank: env.Rank, Size: env.Size, Store: store, Token: env.Token,
			ListenIP: ip, Logf: logf,
		})
	}
}

// agreeTransport: every rank publishes whether it can do RDMA; rank 0
// picks one transport for all and publishes it.
func agreeTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, want string) (string, error) {
	canRDMA := "no"
	if want != "tcp" {
		if err := rdmaAvailable(env); err != nil {
			canRDMA = "no: " + err.Error()
		} else {
			canRDMA = "yes"
		}
	}
	if err := store.Set(ctx, fmt.Sprintf("transport/can-rdma/%d", env.Rank), []byte(canRDMA)); err != nil {
		return "", err
	}
	if env.Rank == 0 {
		chosen := "tcp"
		if want != "tcp" {
			chosen = "rdma"
			for r := 0; r < env.Size; r++ {
				v, err := store.Get(ctx, fmt.Sprintf("transport/can-rdma/%d", r))
				if err != nil {
					return "", err
				}
				if string(v) != "yes" {
					if want == "rdma" {
						chosen = fmt.Sprintf("error: %s (on rank %d)", strings.TrimPrefix(string(v), "no: "), r)
					} else {
						chosen = "tcp"
					}
					break
				}
			}
		}
		if err := store.Set(ctx, "transport/chosen", []byte(chosen)); err != nil {
			return "", err
		}
	}
	v, err := store.Get(ctx, "transport/chosen")
	if err != nil {
		return "", err
	}
	if s := string(v); strings.HasPrefix(s, "error: ") {
		return "", errors.New(strings.TrimPrefix(s, "error: "))
	}
	return string(v), nil
}
