# sparcml: `make demo` and `make test` do all the set-up on a fresh Debian
# machine (they install what is missing with apt-get).

GO      ?= go
BIN     := bin/sparcml
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
# The one source of the build's version (internal/version): the library's
# start-up line, `sparcml version` and sparcml_build_version report it.
VERSION_LDFLAGS := -X github.com/sparcml/sparcml/internal/version.Version=$(VERSION) -X github.com/sparcml/sparcml/internal/version.Commit=$(COMMIT)
# Without libibverbs headers the verbs package builds as a stub and the
# TCP transport is the only one.
VERBS_H := /usr/include/infiniband/verbs.h
# Evaluated when used (after `deps` may have installed the headers).
TAGS    ?= $(shell test -f $(VERBS_H) || echo sparcml_noverbs)
GOFLAGS_TAGS = $(if $(TAGS),-tags $(TAGS),)
# Packages run under the race detector: the runtime's concurrent core (the
# API's machinery under internal/ included), and the training job (ranks as goroutines over sparcml.Local in its tests) and
# its models (products split over goroutines).
RACE_PKGS := ./transport/... ./collectives/... ./fallback/... ./internal/bootstrap/... ./sparse/... . \
	./internal/world ./internal/sparseplan ./internal/flight ./internal/startup ./internal/topology ./internal/deadline ./internal/apihook \
	./train ./train/model

.PHONY: all build deps deps-cluster deps-mpi demo test test-unit test-race test-integration test-cluster test-faults test-faults-soak test-faults-soak-short lint fmt fuzz bench bench-cluster bench-train-cluster bench-torch-cluster sim-validate clean help
.PHONY: lib install deps-python test-bindings

all: build

help:
	@echo "make demo     train on 4 local ranks (dense against top-k), then the benchmark tables"
	@echo "make test     lint, unit, race, integration, bindings, emulated-cluster and RDMA (soft-RoCE VM) tests"
	@echo "make test-cluster  multi-host tests on an emulated cluster (root: network namespaces, tc)"
	@echo "make test-faults   the full fault-injection suite on the emulated cluster (docs/RELIABILITY.md)"
	@echo "make test-faults-soak  SOAK_TRIALS (default 1000) kill trials at P = 4 and 8 on this host (docs/RELIABILITY.md)"
	@echo "make build    build $(BIN)"
	@echo "make lib      build the C ABI, $(LIBSO) (header include/sparcml.h)"
	@echo "make install  install the library, header and pkg-config file under PREFIX (default /usr/local)"
	@echo "make bench    dense collective benchmarks (see docs/PERFORMANCE.md)"
	@echo "make bench-cluster  sparcml against Open MPI on emulated 4- and 8-host clusters (bench/results/)"
	@echo "make sim-validate  sparcml sim against the emulated cluster's measured medians (bench/results/sim-validate.md; SIM_VALIDATE_FLAGS=--bench measures first)"
	@echo "make bench-torch-cluster  the PyTorch backend against gloo, on this host and on emulated hosts (bench/results/)"
	@echo "make bench-train-cluster  sparcml train on emulated 8-host clusters: epoch time and time to accuracy (bench/results/)"
	@echo "make fuzz     run every fuzz target for FUZZTIME (default 30s) each"

deps:
	@bash scripts/deps.sh

deps-cluster:
	@bash scripts/deps.sh cluster

deps-mpi:
	@bash scripts/deps.sh cluster mpi

build: deps
	@mkdir -p bin
	$(GO) build $(GOFLAGS_TAGS) -ldflags "$(VERSION_LDFLAGS)" -o $(BIN) ./cmd/sparcml

# The training part of the demo: the MLP on a fifth of Fashion-MNIST for
# 2 epochs, each variant on the same data and seed (a short run: the
# full one is in docs/TRAINING.md), then logistic regression on URL-like
# data with the dense and the exact sparse reduction of its gradients.
DEMO_TRAIN_VARIANTS ?= dense,topk:0.01,topk:0.01+q4
DEMO_PLOT ?= bin/demo-train.png

demo: build
	@echo "== data-parallel training: 4 ranks, MLP 784-1024-256-10 on 12000 Fashion-MNIST images, $(DEMO_TRAIN_VARIANTS) =="
	$(BIN) train -n 4 --model mlp --data fashion-mnist --samples 12000 --epochs 2 --eval-every 0.5 --compare $(DEMO_TRAIN_VARIANTS) --plot $(DEMO_PLOT)
	@echo
	@echo "== sparse logistic regression on URL-like data (3.2M features, 100 nonzeros per sample): dense against exact sparse allreduce of the gradients =="
	$(BIN) train -n 4 --model logreg --data synthetic:url --samples 20000 --epochs 2 --compare dense,sparse
	@echo
	@echo "== dense allreduce: 4 ranks over shared memory, every result checked against the reference =="
	$(BIN) bench -n 4 --op allreduce --sizes 4K,256K,4M,16M --iters 10 --warmup 2 --check
	@echo
	@echo "== sparse allreduce of a 16M-dimension gradient at 0.1%, 1% and 10% density, against the dense allreduce of the same vector =="
	$(BIN) bench -n 4 --op sparse-allreduce --sizes 16M --density 0.001,0.01,0.1 --iters 10 --warmup 5 --check --vs-dense
	@echo
	@echo "== 4 allreduces in flight while each rank computes (non-blocking overlap) =="
	$(BIN) bench -n 4 --op allreduce --sizes 1M --inflight 4 --compute-mode sleep --iters 5 --warmup 1

test: deps lint test-unit test-race test-integration test-faults-soak-short test-bindings test-cluster test-rdma

# lint also builds and vets for macOS without cgo: the module must stay
# usable as a dependency where only TCP works.
lint:
	@echo "== gofmt, go vet (linux), go build and vet (darwin, no cgo) =="
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(GOFLAGS_TAGS) ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) build ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...

test-unit:
	@echo "== unit tests =="
	$(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 15m $$($(GO) list ./... | grep -v -e /test$$ -e /test/cluster)

test-race:
	@echo "== race detector on the runtime core =="
	$(GO) test $(GOFLAGS_TAGS) -race -count=1 -timeout 20m $(RACE_PKGS)

test-integration: build
	@echo "== multi-process tests through the launcher =="
	SPARCML_BIN=$(CURDIR)/$(BIN) $(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 15m ./test/

# Hosts in network namespaces on a bridge, links shaped with tc; skips with
# the reason when not root or without namespaces (test/cluster/README.md).
test-cluster: build deps-cluster
	@echo "== multi-host tests on an emulated cluster (4 hosts at 1 Gbit/s) =="
	SPARCML_BIN=$(CURDIR)/$(BIN) $(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 10m ./test/cluster/

# The fault-injection suite in full: 100 kill trials per job size (make
# test-cluster runs 10). docs/RELIABILITY.md.
test-faults: build deps-cluster
	@echo "== fault-injection suite on an emulated cluster (4 hosts at 1 Gbit/s) =="
	SPARCML_BIN=$(CURDIR)/$(BIN) SPARCML_CLUSTER_FAULT_TRIALS=100 \
		$(GO) test $(GOFLAGS_TAGS) -count=1 -v -timeout 120m -run 'TestFault' ./test/cluster/

# The kill soak (docs/RELIABILITY.md): SOAK_TRIALS jobs of sparcml bench
# at P = 4 and 8, started by hand and under sparcml run, one random rank
# SIGKILLed in each, in Init or in an operation; every survivor must exit
# non-zero within the bound naming it, and nothing may be left behind.
# make test runs 50 trials (test-faults-soak-short).
SOAK_TRIALS ?= 1000
test-faults-soak: build
	$(GO) run $(GOFLAGS_TAGS) ./test/soak -bin $(BIN) -trials $(SOAK_TRIALS) -timeout 4h

test-faults-soak-short: build
	@echo "== kill soak: 50 trials at P = 4 and 8 =="
	$(GO) run $(GOFLAGS_TAGS) ./test/soak -bin $(BIN) -trials 50 -timeout 20m

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

# sparcml against Open MPI on emulated clusters of 4 and 8 hosts at 1 and
# 10 Gbit/s (not part of `make test`). JSON lines, a Markdown table and a
# PNG plot land in bench/results/. BENCH_CLUSTER_FLAGS narrows the run, e.g.
# "-hosts 8 -rates 1gbit" (go run ./test/cluster/benchcluster -h).
BENCH_CLUSTER_FLAGS ?=
bench-cluster: build deps-mpi
	$(MAKE) -C bench/mpi
	@mkdir -p bench/results
	$(GO) run ./test/cluster/benchcluster -sparcml $(BIN) -mpi bench/mpi -out bench/results/cluster.jsonl $(BENCH_CLUSTER_FLAGS)
	cd test/cluster/plot && $(GO) run . -in ../../../bench/results/cluster.jsonl \
		-md ../../../bench/results/cluster.md -png ../../../bench/results/cluster.png
	@cat bench/results/cluster.md

# The simulator against the emulated cluster (not part of `make test`):
# every 1 Gbit/s case of bench-cluster's results at 4 and 8 hosts (dense
# 16M, sparse 1% uniform) simulated with its own job's calibration, the
# ratio to the measured median (docs/SIMULATION.md). --bench measures the
# cases on the emulated cluster first.
SIM_VALIDATE_FLAGS ?=
sim-validate:
	bash scripts/sim-validate.sh $(SIM_VALIDATE_FLAGS)

# sparcml train on emulated clusters (not part of `make test`): sparse
# logistic regression at 1 Gbit/s, the exact sparse reduction against the
# dense allreduce per epoch, and the MLP at 25 Mbit/s, top-k with error
# feedback and q4 against dense in time to accuracy (docs/TRAINING.md).
# BENCH_TRAIN_CLUSTER_FLAGS changes the cases (go run ./test/cluster/benchtrain -h).
BENCH_TRAIN_CLUSTER_FLAGS ?=
bench-train-cluster: build deps-cluster
	@mkdir -p bench/results
	$(GO) run ./test/cluster/benchtrain -sparcml $(BIN) -out bench/results/train-cluster.jsonl \
		-md bench/results/train-cluster.md $(BENCH_TRAIN_CLUSTER_FLAGS)

# The PyTorch backend against gloo (not part of `make test`): dense all_reduce
# of 16M float32 at P = 4 on this host and on 8 emulated hosts at 1 Gbit/s
# (with `sparcml bench` of the same operation in the same run), the sparse
# embedding gradient, and DDP's overlap with allreduce_hook on 4 emulated
# hosts (docs/PERFORMANCE.md). Each cluster case holds the cluster lock
# only while it runs. BENCH_TORCH_CLUSTER_FLAGS: `-only dense -rounds 3`
# (go run ./test/cluster/benchtorch -h).
BENCH_TORCH_CLUSTER_FLAGS ?=
bench-torch-cluster: build lib deps-cluster deps-python
	@mkdir -p bench/results
	$(GO) run ./test/cluster/benchtorch -sparcml $(BIN) -python $(VENV)/bin/python \
		-out bench/results/torch-cluster.jsonl $(BENCH_TORCH_CLUSTER_FLAGS)

clean:
	rm -rf bin $(LIBDIR) build/test build/stage

# ---- The C ABI and the Python bindings -------------------------------------
# libsparcml.so is built from capi/ against include/sparcml.h, exporting
# exactly the header's functions (capi/exports.sh writes the version script).
LIBDIR    := build/lib
LIBSO     := $(LIBDIR)/libsparcml.so
ABI_MAJOR := $(shell sed -n 's/^\#define SPARCML_VERSION_MAJOR \([0-9]*\).*/\1/p' include/sparcml.h)
ABI_MINOR := $(shell sed -n 's/^\#define SPARCML_VERSION_MINOR \([0-9]*\).*/\1/p' include/sparcml.h)
PREFIX    ?= /usr/local
CTEST     := build/test/capi_test

lib: deps
	@mkdir -p $(LIBDIR)
	@capi/exports.sh include/sparcml.h > $(LIBDIR)/sparcml.map
	$(GO) build $(GOFLAGS_TAGS) -buildmode=c-shared \
		-ldflags '$(VERSION_LDFLAGS) -extldflags "-Wl,--version-script=$(CURDIR)/$(LIBDIR)/sparcml.map -Wl,-soname,libsparcml.so.$(ABI_MAJOR)"' \
		-o $(LIBSO) ./capi
	@rm -f $(LIBDIR)/libsparcml.h # cgo's own header: the ABI is include/sparcml.h
	@ln -sf libsparcml.so $(LIBDIR)/libsparcml.so.$(ABI_MAJOR)

install: lib
	$(eval P := $(abspath $(DESTDIR)$(PREFIX)))
	install -d $(P)/lib/pkgconfig $(P)/include $(P)/lib/python3/dist-packages/sparcml/torch
	install -m 0755 $(LIBSO) $(P)/lib/libsparcml.so.$(ABI_MAJOR).$(ABI_MINOR)
	ln -sf libsparcml.so.$(ABI_MAJOR).$(ABI_MINOR) $(P)/lib/libsparcml.so.$(ABI_MAJOR)
	ln -sf libsparcml.so.$(ABI_MAJOR) $(P)/lib/libsparcml.so
	install -m 0644 include/sparcml.h $(P)/include/sparcml.h
	install -m 0644 python/sparcml/*.py $(P)/lib/python3/dist-packages/sparcml/
	install -m 0644 python/sparcml/torch/*.py $(P)/lib/python3/dist-packages/sparcml/torch/
	sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(ABI_MAJOR).$(ABI_MINOR)|' \
		capi/sparcml.pc.in > $(P)/lib/pkgconfig/sparcml.pc

# The Python tests run in $(VENV): the newest torch from PyPI, NumPy,
# pytest and ruff. scripts/venv.sh keeps the environment outside the clone
# ($$SPARCML_VENV_HOME, default ~/.cache/sparcml) and links $(VENV) to it, so
# a fresh clone does not download torch again.
VENV    ?= .venv
VENV_PY := $(VENV)/bin/python

deps-python:
	@bash scripts/deps.sh python
	@SPARCML_VENV=$(VENV) bash scripts/venv.sh

# Every run is bounded: the launcher's --timeout for the job, SPARCML_TIMEOUT
# for each operation.
BINDINGS_ENV := SPARCML_TIMEOUT=60s SPARCML_DEBUG=NONE

test-bindings: build lib deps-python
	@echo "== C ABI: the library exports exactly the header's functions =="
	capi/check-abi.sh include/sparcml.h $(LIBSO)
	@mkdir -p build/test
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -o $(CTEST) capi/ctest/*.c \
		-L$(LIBDIR) -lsparcml -lm -Wl,-rpath,$(CURDIR)/$(LIBDIR)
	echo "#include <sparcml.h>" | c++ -std=c++11 -Wall -Werror -Iinclude -x c++ -fsyntax-only - # the header in C++
	@echo "== C ABI: every collective and every bad call, 3 ranks under sparcml run =="
	CTEST_BUILD_VERSION=$(VERSION) $(BINDINGS_ENV) $(BIN) run -n 3 --timeout 5m -- $(CTEST)
	@echo "== C ABI: sparcml_init_with, 2 ranks started by hand =="
	capi/ctest/run-explicit.sh $(CTEST) 2
	@echo "== make install and the C example, built through pkg-config =="
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/build/stage
	PKG_CONFIG_PATH=$(CURDIR)/build/stage/lib/pkgconfig $(MAKE) --no-print-directory -C examples/c clean all
	$(BINDINGS_ENV) $(BIN) run -n 3 --timeout 2m -- examples/c/allreduce
	$(BINDINGS_ENV) $(BIN) run -n 3 --timeout 2m -- examples/c/topk_sgd
	@echo "== Python and PyTorch: pytest in $(VENV) (python/tests: collectives, compressor, errors, loading, crash, DDP hooks, the backend) =="
	SPARCML_BIN=$(CURDIR)/$(BIN) SPARCML_STAGE=$(CURDIR)/build/stage $(BINDINGS_ENV) $(VENV_PY) -m pytest -q python/tests; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc
	@echo "== Python: ruff =="
	$(VENV)/bin/ruff check python examples/pytorch

-include test/vm/vm.mk
