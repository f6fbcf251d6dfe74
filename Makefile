# make test   vet and the full test suite with -race against throwaway redis-servers
# make bench  baton against its peers (polling swept 1-50 ms) in each contended shape, drawn as a
#             front, and baton's cost curves (bench/ module; about 7 minutes)
# make chaos  the fault-injection suite at length (minutes); make test runs it briefly
# make soak   the randomized workload (TestWorkload) for SOAK_DURATION; make test runs it briefly
# make sim    the deterministic simulation for SIM_BUDGET (SEED=N STEPS=M replays one run)
GO    ?= go
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BENCH_OUT ?= bench/results

.PHONY: test bench bench-failover bench-smoke bench-compare chaos soak sim fuzz deps vet

# Tests start their own redis-server, replicas and sentinels, and run
# chromium headless once; install them when missing (Debian/Ubuntu).
deps:
	@if ! command -v redis-server >/dev/null || ! command -v redis-sentinel >/dev/null || ! command -v redis-cli >/dev/null; then \
		echo "installing redis-server, redis-sentinel, redis-tools"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server redis-sentinel redis-tools; \
	fi
	@# batonhttp's HTML page is checked once in a real headless browser.
	@if ! command -v chromium >/dev/null; then \
		echo "installing chromium (headless, for batonhttp's HTML test)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; \
	fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd otel && $(GO) vet ./...
	cd prometheus && $(GO) vet ./...
	cd gocron && $(GO) vet ./...
	cd batontest && $(GO) vet ./...

test: deps vet
	$(GO) test -race -count=1 -timeout 15m ./...
	cd bench && $(GO) test -count=1 ./...
	cd otel && $(GO) test -race -count=1 ./...
	cd prometheus && $(GO) test -race -count=1 ./...
	cd gocron && $(GO) test -race -count=1 ./...
	cd batontest && $(GO) test -race -count=1 ./...

CHAOS_DURATION ?= 60s
chaos: deps
	BATON_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -timeout 60m -run Chaos -v .

# SOAK_DURATION is the total, shared equally by TestWorkload's shapes; each
# run logs its seed (BATON_SOAK_SEED=<seed> repeats its random choices).
SOAK_DURATION ?= 10m
SOAK_TIMEOUT  ?= 3h
soak: deps
	BATON_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestWorkload$$' -v .

# The session machine under simulated Redis, network, clocks and faults,
# seed after seed from the clock (make test runs it for 20 s). A failure
# prints its seed: SEED=<seed> replays it with its whole trace.
SIM_BUDGET ?= 10m
SEED       ?=
STEPS      ?= 5000
sim:
ifeq ($(SEED),)
	$(GO) test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./internal/sim -args -budget $(SIM_BUDGET) -steps $(STEPS)
else
	$(GO) test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./internal/sim -args -seed $(SEED) -seeds 1 -steps $(STEPS) -trace
endif

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzName -fuzztime 60s .

bench: deps
	cd bench && $(GO) run ./cmd/lockbench -scenarios standard -out ../$(BENCH_OUT)

# Leader failover of baton's Election: 3 candidate processes, 4 Observe
# readers, 20 rounds each way (~25 s).
bench-failover: deps
	cd bench && $(GO) run ./cmd/lockbench -scenarios failover -out ../$(BENCH_OUT)/failover

# A short run of make bench's shapes and curves, for CI: checks the harness, not the numbers.
bench-smoke: deps
	cd bench && $(GO) run ./cmd/lockbench -scenarios standard -short

# In-repo microbenchmarks against a saved baseline.
bench-compare: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 6 . | tee bench/micro-new.txt
	$(GO) run golang.org/x/perf/cmd/benchstat@latest bench/micro-baseline.txt bench/micro-new.txt
