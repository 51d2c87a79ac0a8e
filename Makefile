# sparcml: `make demo` and `make test` do all the set-up on a fresh Debian
# machine (they install what is missing with apt-get).

GO      ?= go
BIN     := bin/sparcml
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
# Without libibverbs headers the verbs package builds as a stub and the
# TCP transport is the only one.
VERBS_H := /usr/include/infiniband/verbs.h
# Evaluated when used (after `deps` may have installed the headers).
TAGS    ?= $(shell test -f $(VERBS_H) || echo sparcml_noverbs)
GOFLAGS_TAGS = $(if $(TAGS),-tags $(TAGS),)
# Packages run under the race detector: the runtime's concurrent core.
RACE_PKGS := ./transport/... ./collectives/... ./fallback/... ./bootstrap/... ./sparse/... .

.PHONY: all build deps demo test test-unit test-race test-integration lint fmt fuzz bench clean help

all: build

help:
	@echo "make demo     run a 4-rank job over TCP loopback and show the results"
	@echo "make test     lint, unit, race, integration and RDMA (soft-RoCE VM) tests"
	@echo "make build    build $(BIN)"
	@echo "make bench    dense collective benchmarks (see docs/PERFORMANCE.md)"
	@echo "make fuzz     run every fuzz target for FUZZTIME (default 30s) each"

deps:
	@bash scripts/deps.sh

build: deps
	@mkdir -p bin
	$(GO) build $(GOFLAGS_TAGS) -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/sparcml

demo: build
	@echo "== dense allreduce: 4 ranks over TCP loopback, every result checked against the reference =="
	$(BIN) bench -n 4 --op allreduce --sizes 1K:16M --iters 10 --warmup 2 --check
	@echo
	@echo "== sparse allreduce of a 16M-dimension gradient at 0.1%, 1% and 10% density, against the dense allreduce of the same vector =="
	$(BIN) bench -n 4 --op sparse-allreduce --sizes 16M --density 0.001,0.01,0.1 --iters 10 --warmup 5 --check --vs-dense
	@echo
	@echo "== 4 allreduces in flight while each rank computes (non-blocking overlap) =="
	$(BIN) bench -n 4 --op allreduce --sizes 1M --inflight 4 --compute-mode sleep --iters 5 --warmup 1

test: deps lint test-unit test-race test-integration test-rdma

lint:
	@echo "== gofmt, go vet =="
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(GOFLAGS_TAGS) ./...

test-unit:
	@echo "== unit tests =="
	$(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 15m $$($(GO) list ./... | grep -v /test$$)

test-race:
	@echo "== race detector on the runtime core =="
	$(GO) test $(GOFLAGS_TAGS) -race -count=1 -timeout 20m $(RACE_PKGS)

test-integration: build
	@echo "== multi-process tests through the launcher =="
	SPARCML_BIN=$(CURDIR)/$(BIN) $(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 15m ./test/

FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep ^Fuzz); do \
			echo "== $$pkg $$f"; $(GO) test $(GOFLAGS_TAGS) -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

bench: build
	$(BIN) bench -n 4 --op allreduce --sizes 16M --iters 20 --warmup 3 --format table
	$(BIN) bench -n 2 --op p2p --sizes 64K:16M --baseline --iters 20 --warmup 3

clean:
	rm -rf bin

-include test/vm/vm.mk
