# impyard: make build | test | lint | bench | mutate | crash | install | demo
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
# Where make install puts the shell completions each binary prints
# ('CMD completion bash|zsh|fish').
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# Where make install puts the systemd units (scripts/systemd/), e.g.
# /etc/systemd/system; empty installs none.
SYSTEMDDIR ?=
GO      ?= go
STATICCHECK_VERSION ?= v0.8.2
GREMLINS_VERSION ?= v0.6.0
# How many inputs each fuzz target tries in make test. A count, not a
# duration: with a duration, Go 1.26's fuzz coordinator can report its own
# deadline as a failure (golang/go#75804, fixed in Go 1.27) when a loaded
# machine leaves a worker mid-input as the time runs out.
FUZZTIME ?= 50000x
# 1 MiB model streams per path in make bench (BenchmarkMeteredStream).
STREAMS ?= 100

export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin

CMDS := $(notdir $(wildcard cmd/*))
MANS := $(wildcard man/*.[1-8])
UNITS := $(wildcard scripts/systemd/*.service)

.PHONY: all build test unit clock bench-smoke fuzz lint bench mutate crash install demo demo-check clean

all: build

# -buildvcs=auto: --version names the commit even where GOFLAGS turns
# stamping off, and a tree outside git still builds.
build:
	$(GO) build -buildvcs=auto -o bin/ ./cmd/...

# The demo runs last: it is the spine end to end, the way an operator
# first meets it, and a change that breaks it is a failing test. Then,
# whatever failed, scripts/leftovers: every step ran with its temporary
# files under TEST_TMP, and no containerd, shim or mount below it may
# outlive the run.
TEST_TMP ?= /tmp/impyard-test-$(shell printf %s '$(CURDIR)' | cksum | cut -d' ' -f1)
test:
	@mkdir -p $(TEST_TMP); s=0; \
	TMPDIR=$(TEST_TMP) $(MAKE) --no-print-directory unit clock fuzz bench-smoke demo-check || s=$$?; \
	if scripts/leftovers $(TEST_TMP); then rm -rf $(TEST_TMP); else s=1; fi; exit $$s

unit:
	$(GO) test -count=1 -timeout 20m ./...

# The packages whose tests read internal/testclock, run again as if it
# were a second before midnight UTC (IMPYARD_TEST_NOW; the system clock
# is not touched): a test that counts days must pass at any time of day.
# Yesterday's date, so a stamp the system clock made lands on another day.
CLOCK_PKGS = $(sort $(patsubst %/,./%,$(dir $(shell grep -rl --include='*_test.go' 'internal/testclock"' lib cmd tests internal 2>/dev/null))))
clock:
	IMPYARD_TEST_NOW=$$(date -u -d yesterday +%Y-%m-%dT23:59:59Z) $(GO) test -count=1 $(CLOCK_PKGS)

# Every benchmark once: it measures nothing, but a benchmark whose setup
# no longer works fails here rather than when someone measures. The scale
# benchmarks' yards are small here (IMPYARD_BENCH_SCALE).
bench-smoke:
	@mkdir -p bin; echo "bench-smoke: every benchmark once"; \
	IMPYARD_BENCH_SCALE=1000 $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./... >bin/bench-smoke.out 2>&1 || \
	  { grep -v '^ok\|no test files' bin/bench-smoke.out; exit 1; }

# Every fuzz target, briefly: go test runs one target per invocation.
fuzz:
	@mkdir -p bin; set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >bin/fuzz.out 2>&1 || \
	      { cat bin/fuzz.out; exit 1; }; \
	  done; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Counts of the benchmarks whose figures vary most on a shared machine:
# modest by default, larger for a steadier figure
# (make bench BENCH_TRANSITIONS=5000).
BENCH_TRANSITIONS ?= 500
BENCH_ADDS ?= 200
BENCH_LISTS ?= 3
BENCH_DISPATCHES ?= 20
bench:
	$(GO) test -run '^$$' -bench 'Transition' -benchtime $(BENCH_TRANSITIONS)x ./lib/queue/
	$(GO) test -run '^$$' -bench 'AddUniqueAt10k' -benchtime 2000x ./lib/queue/
	$(GO) test -run '^$$' -bench 'List10k' ./lib/queue/
	$(GO) test -run '^$$' -bench 'Spent' -benchtime 20x ./lib/ledger/
	$(GO) test -run '^$$' -bench 'AddVsNq' -benchtime $(BENCH_ADDS)x ./tests/
	$(GO) test -run '^$$' -bench 'Scale100k' -benchtime 100x ./tests/
	$(GO) test -run '^$$' -bench 'List100k' -benchtime $(BENCH_LISTS)x ./tests/
	$(GO) test -run '^$$' -bench 'WatchLatency' -benchtime 50x ./tests/
	$(GO) test -run '^$$' -bench 'EnvelopeToPending|ApproveToExecuted' -benchtime 500x ./tests/
	$(GO) test -run '^$$' -bench 'Dispatch' -benchtime $(BENCH_DISPATCHES)x ./tests/
	$(GO) test -run '^$$' -bench 'Start' -benchtime 50x ./lib/box/
	$(GO) test -run '^$$' -bench 'MeteredStream' -benchtime $(STREAMS)x ./lib/gateway/
	$(GO) test -run '^$$' -bench 'FrameMeter|EventMeter|DecodeBody' -benchtime 300x ./lib/gateway/
	$(GO) test -run '^$$' -bench 'UnmarshalRecord' ./lib/strictjson/
	$(GO) test -run '^$$' -bench 'Judge' -benchtime 20000x ./lib/judge/
	@for s in scripts/bench-*; do [ -x "$$s" ] && { echo "== $$s"; "$$s"; } || true; done

# Mutation testing of the core packages, one at a time (not part of test):
# make mutate PKGS=lib/http1 runs one.
PKGS ?= lib/store lib/gate lib/queue lib/executor lib/trust lib/judge \
	lib/control lib/http1 lib/mcp lib/strictjson lib/transition \
	lib/proposal lib/payload lib/approval lib/inbound lib/earn \
	lib/notify lib/memory lib/ledger lib/mailbox
mutate:
	@command -v gremlins >/dev/null 2>&1 || \
	  $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	scripts/mutate $(PKGS)

# The crash-state harness (impyard(7), Crash safety) wider than make
# test runs it: every prefix of each traced command, every combination
# of up to eight operations not yet durable, more cuts of each write.
crash:
	IMPYARD_CRASH_WIDE=1 $(GO) test -count=1 -timeout 60m -v -run '^TestCrashStates' ./tests/

install: build
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(addprefix bin/,$(CMDS)) $(DESTDIR)$(BINDIR)/
# The pages' footers name what was built: the release, or for a build
# between releases the commit (the pseudo-version is too long to show).
	@v=$$(bin/impsup --version | cut -d' ' -f2); \
	r=$$(bin/impsup --version | sed -n 's/.*(\([0-9a-f]\{12\}\).*/\1/p'); \
	case $$v in v0.0.0-*|'(devel)') v=$${r:-devel};; esac; \
	mkdir -p bin/man; \
	for m in $(MANS); do \
	  s=$${m##*.}; install -d $(DESTDIR)$(MANDIR)/man$$s; \
	  sed "s|^\.Os impyard\$$|.Os impyard $$v|" $$m >bin/man/$${m##*/}; \
	  install -m 0644 bin/man/$${m##*/} $(DESTDIR)$(MANDIR)/man$$s/; \
	done
# The completions come from the binaries just built, so they name the
# flags those binaries parse.
	@mkdir -p bin/completions; \
	install -d $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR); \
	for c in $(CMDS); do \
	  bin/$$c completion bash >bin/completions/$$c && \
	  bin/$$c completion zsh >bin/completions/_$$c && \
	  bin/$$c completion fish >bin/completions/$$c.fish || exit 1; \
	  install -m 0644 bin/completions/$$c $(DESTDIR)$(BASHCOMPDIR)/$$c; \
	  install -m 0644 bin/completions/_$$c $(DESTDIR)$(ZSHCOMPDIR)/_$$c; \
	  install -m 0644 bin/completions/$$c.fish $(DESTDIR)$(FISHCOMPDIR)/$$c.fish; \
	done
# The units name the binaries where this install put them.
	@if [ -n "$(SYSTEMDDIR)" ]; then \
	  install -d $(DESTDIR)$(SYSTEMDDIR); mkdir -p bin/units; \
	  for u in $(UNITS); do \
	    sed 's|^ExecStart=/usr/local/bin/|ExecStart=$(BINDIR)/|' $$u >bin/units/$${u##*/}; \
	    install -m 0644 bin/units/$${u##*/} $(DESTDIR)$(SYSTEMDDIR)/; \
	    echo "installed $(DESTDIR)$(SYSTEMDDIR)/$${u##*/}"; \
	  done; \
	  echo "then: systemctl daemon-reload; systemctl enable --now impgw impexec impsup (and impgate-desk for the phone desk)"; \
	fi

demo:
	scripts/demo

# make test installs what its tests need first, as make demo does
# (scripts/deps, with apt-get, as root; anyone else is told what is
# missing and the tests that need it skip or fail naming it).
.PHONY: deps
unit clock fuzz bench-smoke demo-check: | deps
deps:
	@if [ "$$(id -u)" -eq 0 ]; then scripts/deps; else scripts/deps || true; fi

# make test runs the demo where it can (as root), quietly unless it fails.
demo-check:
	@if [ "$$(id -u)" -ne 0 ]; then echo "demo-check: skipped, not root"; \
	else echo "demo-check: scripts/demo"; mkdir -p bin; scripts/demo >bin/demo.out 2>&1 || \
	  { cat bin/demo.out; exit 1; }; fi

clean:
	rm -rf bin
