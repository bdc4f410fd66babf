# A thin wrapper around CMake. Every configuration builds in a directory of
# its own, so `make asan` never forces a rebuild of `make`'s tree:
#
#   make                  library, examples, tests, benchmarks in build/
#   make test             the above, then every test (ctest -j2)
#   make demo             the above, then examples/demo.sh
#   make install [PREFIX=/usr/local] [DESTDIR=...]
#   make asan             ASan+UBSan build in build-asan, all tests
#   make tsan             TSan build in build-tsan, the tests TSan can hold
#   make seeds [SEEDS=..] the tests with the ready queue shuffled (WEFT_SEED)
#   make valgrind         all tests under valgrind memcheck, in build-valgrind
#   make ucontext         the ucontext context switch, in build-ucontext
#   make aarch64          cross build in build-aarch64, tests under qemu-user
#   make clang            the library and tests built by clang, in build-clang
#   make fuzz [FUZZ_SECONDS=60]  libFuzzer targets (clang, ASan+UBSan) in
#                         build-fuzz, each run that long from a copy of its
#                         seed corpus in tests/fuzz/corpus; fails on a crash
#   make bench [ONLY=name]  bench/run.sh [name]
#   make soak [SOAK_SECONDS=60] [SOAK_FLAGS=...]  the echo server under
#                         churning clients (tests/soak), from build/
#   make clean
#
# Each target first runs scripts/deps.sh for what it needs; a missing package
# stops it with the apt-get line to run.

PREFIX ?= /usr/local
ONLY ?=
JOBS ?= $(shell nproc 2> /dev/null || echo 2)
CMAKE ?= cmake
CTEST ?= ctest
CTEST_FLAGS ?= --output-on-failure -j2 --no-tests=error
FUZZ_SECONDS ?= 60
# `make soak`: how long it runs, and more of tests/soak/soak's flags
# (--seed S to replay a run, --clients N, --hours H instead of seconds).
SOAK_SECONDS ?= 60
SOAK_FLAGS ?=
DEPS := bash scripts/deps.sh

# Every test under memcheck: any error, or a definitely or indirectly lost
# block, makes the test fail (exit 99). CMake wants the command as a list.
# --fair-sched=yes: valgrind runs one thread at a time, and without it a
# thread can keep that turn while another waits for it; test_threadsafe,
# alone on the machine, took over 120 s that way (1 s with it).
VALGRIND ?= valgrind --fair-sched=yes --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite,indirect \
  --show-leak-kinds=definite,indirect -q
space := $(subst ,, )
VALGRIND_LAUNCHER = $(subst $(space),;,$(strip $(VALGRIND)))

# The extra configurations only run the tests: the benchmarks would just
# cost build time (and, cross, need the comparison libraries for aarch64),
# and so would link-time optimisation (build/ has it: the tests run on the
# LTO code there).
VARIANT_FLAGS := -DWEFT_BUILD_BENCH=OFF -DWEFT_LTO=OFF

# A failing UBSan check prints its stack; ASan's defaults are kept.
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

BUILD_DIRS := build build-asan build-tsan build-valgrind build-ucontext \
              build-aarch64 build-clang build-fuzz

# The recipes hand their own -j to CMake's build; running two of them at once
# in the same tree (`make -j test demo`) would race, so make stays serial.
.NOTPARALLEL:
.PHONY: all build test demo install asan tsan valgrind ucontext aarch64 clang \
        seeds fuzz bench bench-deps soak clean

all: build

# CMake's build runs its own make. Without this it would inherit our
# MAKEFLAGS (a jobserver it cannot reach, warnings) and MAKELEVEL (an
# "Entering directory" line for every step).
SUBMAKE_ENV := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL

# $(call configure,DIR,CMAKE-ARGS...): (re)configure and build DIR. Running
# cmake each time is cheap and keeps DIR's options what this file says.
define configure
	$(CMAKE) -S . -B $(1) $(2)
	$(SUBMAKE_ENV) $(CMAKE) --build $(1) -j $(JOBS)
endef

# $(call variant,DIR,CMAKE-ARGS,CTEST-ARGS): build DIR, then run every test
# in it (the slow variants leave out label backend_copy with CTEST-ARGS:
# tests/CMakeLists.txt).
define variant
	$(call configure,$(1),$(VARIANT_FLAGS) $(2))
	cd $(1) && $(CTEST) $(CTEST_FLAGS) $(3)
endef

build:
	@$(DEPS) core
	@$(DEPS) --optional uring
	$(call configure,build,)

test: build
	cd build && $(CTEST) $(CTEST_FLAGS)

demo: build
	@if [ -f examples/demo.sh ]; then \
	  bash examples/demo.sh build/examples; \
	else \
	  echo "make demo: examples/demo.sh does not exist yet"; \
	fi

# Into a system prefix (/usr or /usr/local) as root, with no DESTDIR,
# ldconfig updates ld.so's cache, without which a program linked against
# libweft.so.0 there does not find it at run time. Another prefix is the
# user's to point LD_LIBRARY_PATH or an rpath at (README): the system's
# cache is left alone.
#
# It builds the library alone: the tests, examples and benchmarks are for
# make test, make demo and make bench.
install:
	@$(DEPS) core
	@$(DEPS) --optional uring
	$(CMAKE) -S . -B build
	$(SUBMAKE_ENV) $(CMAKE) --build build -j $(JOBS) --target weft weft_shared
	DESTDIR='$(DESTDIR)' $(CMAKE) --install build --prefix '$(PREFIX)'
	@case '$(PREFIX)' in /usr|/usr/|/usr/local|/usr/local/) system=1;; *) system=0;; esac; \
	if [ $$system = 1 ] && [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

asan:
	@$(DEPS) core
	$(call variant,build-asan,-DWEFT_SANITIZE=address)

# The suite with the ready queue shuffled (WEFT_SEED), under a few seeds:
# code or tests that lean on FIFO order show up. The examples whose output
# is the seeds' FIFO interleaving are left out (label fifo), and so are the
# tests that make no loop (no_loop), where a seed changes nothing.
SEEDS ?= 1 2 3
seeds: build
	@for s in $(SEEDS); do \
	  echo "== WEFT_SEED=$$s"; \
	  (cd build && WEFT_SEED=$$s $(CTEST) $(CTEST_FLAGS) -LE 'fifo|no_loop') || exit 1; \
	done

# TSan: every test but the few it cannot hold (tests/CMakeLists.txt says
# which and why); the pool, the thread-safe queue and the wake-up included.
tsan:
	@$(DEPS) core
	$(call configure,build-tsan,$(VARIANT_FLAGS) -DWEFT_SANITIZE=thread)
	cd build-tsan && $(CTEST) $(CTEST_FLAGS) -LE 'tsan_unfit|backend_copy'

valgrind:
	@$(DEPS) core valgrind
	$(call variant,build-valgrind,'-DWEFT_TEST_LAUNCHER=$(VALGRIND_LAUNCHER)',-LE backend_copy)

# The suite on the ucontext switch, but for the stack tests, which switch
# no context (label no_switch).
ucontext:
	@$(DEPS) core
	$(call variant,build-ucontext,-DWEFT_CTX=ucontext,-LE 'backend_copy|no_switch')

# The toolchain file also makes qemu-aarch64 the tests' launcher.
aarch64:
	@$(DEPS) core aarch64
	$(call variant,build-aarch64,-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake,-LE backend_copy)

# The suite built by clang (build/ is GCC's): code and tests that lean on
# what one compiler does with undefined or unspecified behaviour show up (a
# stack array that clang shrank once made a test of stack use fail).
clang:
	@$(DEPS) core clang
	$(call variant,build-clang,-DCMAKE_C_COMPILER=clang,-LE backend_copy)

# libFuzzer is clang's; the whole tree gets its coverage flags and ASan+UBSan
# (CMakeLists.txt, WEFT_FUZZ), and only the fuzz targets are built.
FUZZ_TARGETS := fuzz_stream
fuzz:
	@$(DEPS) core fuzz
	$(CMAKE) -S . -B build-fuzz $(VARIANT_FLAGS) -DWEFT_BUILD_TESTS=OFF \
	  -DWEFT_BUILD_EXAMPLES=OFF -DCMAKE_C_COMPILER=clang -DWEFT_FUZZ=ON \
	  -DWEFT_SANITIZE=address
	$(SUBMAKE_ENV) $(CMAKE) --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The packages first, then the build: CMake must configure with them
# installed, or the first run (CI=true installing them) lacks their peers.
bench: bench-deps build
	@if [ -f bench/run.sh ]; then \
	  WEFT_BUILD_DIR=$(CURDIR)/build bash bench/run.sh $(ONLY); \
	else \
	  echo "make bench: bench/run.sh does not exist yet"; exit 1; \
	fi

bench-deps:
	@$(DEPS) bench

# The soak's exit status says whether the server held (docs/testing.md).
soak: build
	build/tests/soak/soak --seconds $(SOAK_SECONDS) \
	  --server build/examples/echo_server $(SOAK_FLAGS)

clean:
	rm -rf $(BUILD_DIRS)
