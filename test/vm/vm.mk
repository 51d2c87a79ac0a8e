# test/vm/vm.mk: soft-RoCE guest targets, included from the top-level Makefile.
# See test/vm/README.md. Every guest runs under `timeout` and powers itself
# off; a hang fails the target instead of blocking.
#
#   make vm-image        build (or reuse) the Debian guest image
#   make test-rdma       host-built test binaries of VM_TEST_PKGS in ONE guest
#   make test-rdma-2vm   two guests joined by a virtual link: perftest, sparcml
#                        bench (p2p, allreduce --check) with one rank per guest
#   make bench-rdma      ib_write_bw vs sparcml p2p, dense allreduce rdma/tcp
#
# Knobs (make VAR=... or environment):
#   VM_TEST_PKGS      packages whose tests run in the guest
#   VM_TEST_FLAGS     extra flags for every test binary (e.g. -test.v -test.run X)
#   VM_TEST_TIMEOUT   per test binary (default 10m)
#   SPARCML_VM_TIMEOUT  whole guest run in seconds (default 1200)
#   SPARCML_VM_CACHE  image cache (default test/vm/cache; point it at a
#                     persistent directory to reuse the image between CI runs)
#   VM_2VM_TEST       extra command run in both guests by test-rdma-2vm
#   VM_2VM_LINK       socket (lossless, default) or udp (lossy: exercises RC
#                     retransmission; see README)
#   VM_BENCH_DEPS     prerequisites of bench-rdma / test-rdma-2vm (bin/sparcml)

VM_SH            ?= test/vm/vm.sh
VM_TEST_DIR      ?= build/vm-tests
# ./test/ is the multi-process collective suite (dense and sparse, every
# algorithm, checked results, a killed rank, bad input) run over the RDMA
# transport with P = 2, 3, 4 (see guest-tests.sh); the pure-Go collectives
# package needs no guest.
VM_TEST_PKGS     ?= ./rdma/... ./verbs/... ./memreg/... ./test/
VM_TEST_FLAGS    ?=
VM_TEST_TIMEOUT  ?= 10m
VM_2VM_TEST      ?=
VM_2VM_LINK      ?= socket
VM_BENCH_DEPS    ?= build
# Passed to the guest through the environment, so shell syntax and `$` in
# them survive: VM_2VM_TEST='echo $$SPARCML_RANK' on the make command line,
# or VM_2VM_TEST='echo $SPARCML_RANK' make test-rdma-2vm.
export VM_TEST_FLAGS VM_TEST_TIMEOUT VM_2VM_TEST

.PHONY: vm-image vm-tests test-rdma test-rdma-2vm bench-rdma vm-info vm-clean

vm-image:
	@echo "== soft-RoCE guest image =="
	@$(VM_SH) image

vm-tests: build
	@echo "== test binaries for the guest =="
	@GO="$(GO)" GOFLAGS_TAGS="$(GOFLAGS_TAGS)" test/vm/build-tests.sh $(VM_TEST_DIR) $(VM_TEST_PKGS)
	$(GO) build $(GOFLAGS_TAGS) -o $(VM_TEST_DIR)/testprog ./test/testprog

test-rdma: vm-image vm-tests
	@echo "== RDMA tests in a soft-RoCE guest =="
	$(VM_SH) run -e VM_TEST_FLAGS="$$VM_TEST_FLAGS" -e VM_TEST_TIMEOUT="$$VM_TEST_TIMEOUT" \
		-- test/vm/guest-tests.sh $(VM_TEST_DIR)

test-rdma-2vm: vm-image $(VM_BENCH_DEPS)
	@echo "== RDMA across two soft-RoCE guests =="
	$(VM_SH) run2 --link $(VM_2VM_LINK) -e VM_2VM_TEST="$$VM_2VM_TEST" \
		-- test/vm/guest-2vm.sh -- test/vm/guest-2vm.sh

# guest-bench.sh's knobs (BENCH_REPEAT=3 make bench-rdma, ...) reach the
# guest only through -e: vm.sh passes on the caller's SPARCML_* alone.
VM_BENCH_KNOBS := BENCH_ITERS BENCH_RANKS BENCH_SIZES_BYTES BENCH_WINDOW BENCH_P2P_W1 BENCH_REPEAT BENCH_BIND

bench-rdma: vm-image $(VM_BENCH_DEPS)
	@echo "== RDMA benchmarks in a soft-RoCE guest (TCG: compare only within this run) =="
	$(VM_SH) run $(foreach v,$(VM_BENCH_KNOBS),$(if $($(v)),-e '$(v)=$($(v))')) -- test/vm/guest-bench.sh

vm-info:
	@$(VM_SH) info

vm-clean:
	rm -rf $(VM_TEST_DIR)
	$(VM_SH) clean
