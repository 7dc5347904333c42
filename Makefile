# Small targets for the daily loop.  The extension is built in place so that
# `import pywheel` from this folder is always the fresh build.
PYTHON ?= python3
CC ?= cc
CORE = csrc/core
BINDING = csrc/binding
CFLAGS_C = -std=c11 -O2 -g -Wall -Wextra -Werror -I$(CORE)
# The platform layer (platform.h): both files in every build, each compiles
# to nothing on the other platform.
PLATFORM = $(CORE)/platform_posix.c $(CORE)/platform_win32.c
SAN = -fsanitize=address,undefined -fno-omit-frame-pointer
LIBASAN = $(shell $(CC) -print-file-name=libasan.so)

.PHONY: build test test-c tsan sanitize valgrind demo bench parity lint fmt clean \
  warnings macos-check windows-check stubtest dist test-installed test-sdist real-bugs virtual-suites forky \
  parity-forky bench-forky virtual-aiohttp parity-uvloop parity-rloop docs docs-shots

build:
	$(PYTHON) setup.py -q build_ext --inplace

test: build
	$(PYTHON) -m pytest -q

test-c:
	mkdir -p build
	$(CC) $(CFLAGS_C) -o build/test_wheel $(CORE)/test_wheel.c $(CORE)/wheel.c
	$(CC) $(CFLAGS_C) -o build/test_driver $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c $(PLATFORM) -lpthread
	$(CC) $(CFLAGS_C) -o build/test_slab $(CORE)/test_slab.c $(CORE)/slab.c
	$(CC) $(CFLAGS_C) -DPW_RELATIVE_WAITS -DPW_LONGEST_WAIT_NS=1000000 -o build/test_driver_rel \
	  $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c $(PLATFORM) -lpthread
	./build/test_wheel 1 && ./build/test_wheel 2 && ./build/test_driver && ./build/test_slab
	./build/test_driver_rel

# The driver's C test under ThreadSanitizer.
tsan:
	mkdir -p build
	$(CC) $(CFLAGS_C) -O1 -fsanitize=thread -o build/test_driver_tsan \
	  $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c $(PLATFORM) -lpthread
	TSAN_OPTIONS=halt_on_error=1 ./build/test_driver_tsan 4 3000

# The C tests under ASan+UBSan, then the whole Python suite against an
# ASan+UBSan build of the extension (rebuilt normally afterwards).
sanitize:
	mkdir -p build
	$(CC) $(CFLAGS_C) $(SAN) -o build/test_wheel_san $(CORE)/test_wheel.c $(CORE)/wheel.c
	./build/test_wheel_san 1
	$(CC) $(CFLAGS_C) $(SAN) -o build/test_slab_san $(CORE)/test_slab.c $(CORE)/slab.c
	./build/test_slab_san 1
	PYWHEEL_SANITIZE=address,undefined $(PYTHON) setup.py -q build_ext --inplace --force
	LD_PRELOAD=$(LIBASAN) ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider; status=$$?; \
	  $(PYTHON) setup.py -q build_ext --inplace --force; exit $$status

valgrind:
	mkdir -p build
	$(CC) $(CFLAGS_C) -o build/test_wheel $(CORE)/test_wheel.c $(CORE)/wheel.c
	valgrind --error-exitcode=1 --leak-check=full -q ./build/test_wheel 1 20000
	$(CC) $(CFLAGS_C) -o build/test_driver $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c $(PLATFORM) -lpthread
	valgrind --error-exitcode=1 --leak-check=full -q ./build/test_driver 2 2000
	$(CC) $(CFLAGS_C) -o build/test_slab $(CORE)/test_slab.c $(CORE)/slab.c
	valgrind --error-exitcode=1 --leak-check=full -q ./build/test_slab 1 100000

# Every C file, the binding's with Python's headers, under -Wall -Wextra -Werror,
# with gcc and with clang (apt-get install clang); a missing compiler is said.
warnings:
	@inc=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	status=0; for cc in gcc clang; do \
	  if ! command -v $$cc >/dev/null; then echo "$$cc: not installed, skipped"; continue; fi; \
	  for f in $(CORE)/*.c $(BINDING)/*.c; do \
	    $$cc -std=c11 -O2 -Wall -Wextra -Werror -fsyntax-only -I$(CORE) -I$(BINDING) -I$$inc $$f || status=1; \
	  done; echo "$$cc: checked"; \
	done; exit $$status

# macOS, x86_64 and arm64: the extension and the core's C tests compiled and
# linked with zig's cross-compiler (PyPI's ziglang, in a cached venv) under
# -Wall -Wextra -Werror.  Nothing here can run them.  The binding is compiled
# against this Python's headers (whose pyconfig.h is Linux's: a real macOS
# build uses its own), linked as a bundle resolving Python's symbols at load.
ZIG_VENV ?= $(HOME)/.cache/pywheel-zig
macos-check:
	@test -x $(ZIG_VENV)/bin/python -a -d $(ZIG_VENV)/lib/python3*/site-packages/ziglang || \
	  { $(PYTHON) -m venv $(ZIG_VENV) && $(ZIG_VENV)/bin/pip install -q ziglang; }
	@inc=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	zig="$(ZIG_VENV)/bin/python -m ziglang cc"; out=$$(mktemp -d); status=0; \
	flags="-std=c11 -O2 -Wall -Wextra -Werror -I$(CORE) -I$(BINDING)"; \
	for t in x86_64-macos.10.15 aarch64-macos.11.0; do \
	  $$zig -target $$t $$flags -fvisibility=hidden -I$$inc -shared -Wl,-undefined,dynamic_lookup \
	    -o $$out/_core.so $(CORE)/wheel.c $(CORE)/driver.c $(CORE)/slab.c $(PLATFORM) $(BINDING)/*.c \
	    -lpthread \
	    || status=1; \
	  for p in wheel:wheel.c driver:"driver.c wheel.c platform_posix.c" slab:slab.c; do \
	    srcs=; for f in $${p#*:}; do srcs="$$srcs $(CORE)/$$f"; done; \
	    $$zig -target $$t $$flags -o $$out/test_$${p%%:*} $(CORE)/test_$${p%%:*}.c $$srcs -lpthread \
	      || status=1; \
	  done; \
	  if command -v file >/dev/null; then file $$out/_core.so $$out/test_driver | sed "s|$$out/||"; fi; \
	done; rm -rf $$out; exit $$status

# Windows, x86_64 and arm64 (.ci/windows-check says what and how): the core's
# C tests cross-compiled with zig (ZIG_VENV, as above) and run under wine (x86_64;
# Debian's wine and wine64, installed when missing and root); the extension
# compiled against CPython 3.14.7's Windows headers and linked as a .pyd
# against python314.dll's exports alone.  No Python runs on Windows here.
windows-check:
	@PYTHON=$(PYTHON) ZIG_VENV=$(ZIG_VENV) .ci/windows-check

# The type stubs against the built extension.
stubtest: build
	$(PYTHON) -m mypy.stubtest pywheel._core

# What users install (see .ci/test-dist): the sdist and the wheel in dist/,
# checked by twine and check-wheel-contents; the suite against the wheel
# installed in a fresh venv, run from outside this tree; the same after
# `pip install` of the sdist.
dist:
	PYTHON=$(PYTHON) .ci/test-dist build

test-installed:
	PYTHON=$(PYTHON) .ci/test-dist wheel

test-sdist:
	PYTHON=$(PYTHON) .ci/test-dist sdist

# CPython 3.14 and 3.15 from Debian forky, in a chroot (.ci/forky; needs root,
# debootstrap and the network; the root is cached in /var/cache/pywheel-forky):
# `make forky` runs what CI runs there (README set-up and suite, CPython's
# asyncio tests, stubtest, warnings) on both; parity-forky the parity harness
# on both (PARITY_ARGS, e.g. --suite cpython); bench-forky the quick
# benchmarks under 3.14.  Results outlive the root in FORKY_OUT.
FORKY_OUT ?= $(HOME)/.cache/pywheel-forky-out
PARITY_ARGS ?=
forky:
	.ci/forky check 3.14; a=$$?; .ci/forky check 3.15; b=$$?; [ $$a = 0 ] && [ $$b = 0 ]

parity-forky:
	OUT=$(FORKY_OUT) .ci/forky run bash -c 'python3.14 -m venv /tmp/parity-venv && \
	  /tmp/parity-venv/bin/python tests/parity/parity.py --cache /tmp/out/parity \
	  --python 3.14 --python 3.15 $(PARITY_ARGS)'

bench-forky:
	OUT=$(FORKY_OUT) .ci/forky run bash -c 'python3.14 -m venv /tmp/bench-venv && \
	  . /tmp/bench-venv/bin/activate && pip install -q -e '\''.[bench]'\'' && \
	  python -m benchmarks --quick 2>&1 | tee /tmp/out/bench-quick-3.14.txt'

demo: build
	$(PYTHON) -m pywheel

# Other projects' asyncio suites (CPython's, anyio's, pytest-asyncio's, part of
# aiohttp's) on the stock loop and on WheelEventLoop, compared test by test.
# About half an hour; downloads and venvs go to ~/.cache/pywheel-parity.
parity: build
	$(PYTHON) tests/parity/parity.py

# aiohttp's pytest fixtures on pytest --virtual-time: aiohttp is not in the test
# extra, so this installs it (as CI does) and runs the one file that needs it.
virtual-aiohttp: build
	$(PYTHON) -m pip install -q aiohttp
	$(PYTHON) -m pytest -q tests/test_virtual_time_aiohttp.py

# The same suites on uvloop and on pywheel.uvloop (uvloop, from PyPI, is the oracle).
# Last run (2026-12-01, uvloop 0.23.0): CPython's whole test.test_asyncio on
# 3.11/3.12/3.13, 1,549/1,598/1,680 passed on both, 0 lost; aiohttp's subset on
# 3.12 and 3.13, 2,412 on uvloop, 2,413 on pywheel.uvloop, 0 lost. About 30
# minutes a Python for CPython's suite on two loaded cores (the hung and
# runaway tests cost 120 s each), 12 for aiohttp's.
parity-uvloop: build
	$(PYTHON) tests/parity/parity.py --uvloop

# The same on rloop and on pywheel.rloop (rloop, from PyPI, is the oracle; it
# fails much of CPython's suite itself, which cancels out).  CPython's suite:
# the modules of tests/cpython/run_asyncio_suite.py's DEFAULT on 3.11 by
# default here (RLOOP_PARITY= "" runs every suite on every Python found).
# Last run (2026-12-03, rloop 0.5.0): 1,577 tests, 1,239 passed on both, every
# outcome the same, 0 lost; about 4 minutes.
RLOOP_MODULES = timeouts waitfor events base_events tasks taskgroups locks queues streams sock_lowlevel
RLOOP_PARITY ?= --suite cpython --python 3.11 $(foreach m,$(RLOOP_MODULES),--module test.test_asyncio.test_$(m))
parity-rloop: build
	$(PYTHON) tests/parity/parity.py --rloop $(RLOOP_PARITY)

# The full side-by-side run (tens of minutes); --quick takes about a minute.
bench: build
	$(PYTHON) -m benchmarks --out benchmarks/results
	$(PYTHON) -m benchmarks.asyncio_timeouts

# The documentation site (docs/, Sphinx + MyST + furo) from nothing, nitpicky,
# every warning an error: a broken link between pages or to a file, a role
# naming no object, a page in no toctree all fail it.  Sphinx comes from the
# `docs` extra in the venv $(PYTHON) runs (pip install -e '.[docs]'); the
# extension is rebuilt in place first, so the reference shows the docstrings
# of the C code as it is.
docs:
	@$(PYTHON) -c 'import sphinx, myst_parser, furo' 2>/dev/null || { \
	  echo "make docs: $(PYTHON) has no sphinx, myst-parser or furo:" \
	    "pip install -e '.[docs]' in its venv (or make docs PYTHON=that-venv/bin/python)" >&2; \
	  exit 1; }
	$(PYTHON) setup.py -q build_ext --inplace
	rm -rf docs/_build
	$(PYTHON) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html

# The built site as a reader sees it: the index, a tutorial and the API
# reference rendered to PNGs in docs/_build/shots/ by headless Chromium
# (Debian's package: apt-get install chromium).
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser)
DOCS_SHOTS = docs/_build/shots
docs-shots: docs
	@test -n "$(CHROMIUM)" || { echo "make docs-shots: no chromium: apt-get install -y chromium" >&2; exit 1; }
	mkdir -p $(DOCS_SHOTS)
	@for page in index tutorials/idle-timeouts reference/pywheel; do \
	  out=$(DOCS_SHOTS)/$$(echo $$page | tr / -).png; \
	  $(CHROMIUM) --headless --no-sandbox --disable-gpu --hide-scrollbars \
	    --window-size=1280,2000 --screenshot=$$out file://$(CURDIR)/docs/_build/html/$$page.html \
	    2>/dev/null || exit 1; \
	  echo $$out; \
	done

lint:
	ruff check .
	ruff format --check .
	clang-format --dry-run --Werror $(CORE)/*.[ch] $(BINDING)/*.[ch]

fmt:
	ruff check --fix .
	ruff format .
	clang-format -i $(CORE)/*.[ch] $(BINDING)/*.[ch]

# The real-bug corpus (examples/real_bugs): each buggy and fixed version shown
# real on the stock loop (venvs made from PyPI, cached), then the scoreboard.
real-bugs: build
	$(PYTHON) -m pytest -q -m real_bugs tests/test_real_bugs.py
	$(PYTHON) -m examples.real_bugs

# Five real libraries' suites (benchmarks/virtual_suites.py) from their sdists:
# every test passing on the stock loop passes under `pytest --virtual-time`
# (tests/test_virtual_suites.py), then the benchmark: stock, virtual time,
# looptime, timeless_loop, best of 3 (about 15 minutes; venvs cached in
# ~/.cache/pywheel-virtual-suites).
virtual-suites: build
	$(PYTHON) -m pytest -q -p no:cacheprovider -m virtual_suites tests/test_virtual_suites.py
	$(PYTHON) -m benchmarks.virtual_suites

clean:
	rm -rf build dist *.egg-info pywheel/*.so

# ---- the core's C tests on other POSIX targets ---------------------------------
# aarch64-check: the core's C tests cross-built for aarch64 Linux (glibc, as
# manylinux aarch64 wheels are) with Debian's gcc-aarch64-linux-gnu and run
# under Debian's qemu-user (qemu-aarch64 -L the cross sysroot: no binfmt).
# musl-check: the same tests built statically against musl with Debian's
# musl-tools (musl-gcc, as musllinux wheels are built with gcc) and run here.
# Both under -Wall -Wextra -Werror; each installs its packages first when
# missing and apt-get can (root), else says which.  The runs are test-c's.
# XCHECK_TESTS: each test and the core files it links beyond XCHECK_COMMON
# (core files every test links: a platform layer goes there).
XCHECK_COMMON = platform_posix.c platform_win32.c
XCHECK_TESTS = wheel:wheel.c driver:driver.c,wheel.c slab:slab.c
AARCH64_SYSROOT ?= /usr/aarch64-linux-gnu

.PHONY: aarch64-check musl-check

# $(call xcheck_need,command,debian packages)
xcheck_need = command -v $(1) > /dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	    echo "installing $(2)"; export DEBIAN_FRONTEND=noninteractive; \
	    timeout 300 apt-get -o DPkg::Lock::Timeout=240 update -qq > /dev/null && \
	    timeout 900 apt-get -o DPkg::Lock::Timeout=240 install -y -qq --no-install-recommends $(2) > /dev/null; \
	  fi; command -v $(1) > /dev/null || { echo "$@: $(1) missing: apt-get install $(2)" >&2; exit 1; }; }

# Builds each test with $(XCC) $(XFLAGS) into $(XOUT), test_driver also with
# macOS's relative waits, then runs test-c's runs through $(XRUN), saying each.
XCHECK_RUN = set -e; mkdir -p $(XOUT); echo "$(XCC): $$($(XCC) --version | head -1)"; \
	flags="$(CFLAGS_C) $(XFLAGS)"; common="$(addprefix $(CORE)/,$(XCHECK_COMMON))"; \
	for t in $(XCHECK_TESTS); do \
	  srcs=$$common; for f in $$(echo $${t\#*:} | tr , ' '); do srcs="$$srcs $(CORE)/$$f"; done; \
	  echo "build $(XOUT)/test_$${t%%:*}"; \
	  $(XCC) $$flags -o $(XOUT)/test_$${t%%:*} $(CORE)/test_$${t%%:*}.c $$srcs -lpthread; \
	  if [ $${t%%:*} = driver ]; then \
	    $(XCC) $$flags -DPW_RELATIVE_WAITS -DPW_LONGEST_WAIT_NS=1000000 -o $(XOUT)/test_driver_rel \
	      $(CORE)/test_driver.c $$srcs -lpthread; fi; \
	done; \
	if command -v file > /dev/null; then file $(XOUT)/test_driver | sed 's|^[^:]*/||'; fi; \
	for run in "test_wheel 1" "test_wheel 2" test_driver test_slab test_driver_rel; do \
	  echo "run: $(XRUN) $(XOUT)/$$run"; t0=$$(date +%s.%N); \
	  $(XRUN) $(XOUT)/$$run > $(XOUT)/last.log 2>&1 || { cat $(XOUT)/last.log; echo "$@: FAILED: $$run"; exit 1; }; \
	  tail -n 1 $(XOUT)/last.log | sed 's/^/  /'; \
	  echo "  ok ($$(awk "BEGIN { printf \"%.1f\", $$(date +%s.%N) - $$t0 }") s)"; \
	done; echo "$@: all passed"

aarch64-check: XCC = aarch64-linux-gnu-gcc
aarch64-check: XFLAGS =
aarch64-check: XRUN = qemu-aarch64 -L $(AARCH64_SYSROOT)
aarch64-check: XOUT = build/aarch64
aarch64-check:
	@$(call xcheck_need,aarch64-linux-gnu-gcc,gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
	@$(call xcheck_need,qemu-aarch64,qemu-user)
	@$(XCHECK_RUN)

musl-check: XCC = musl-gcc
musl-check: XFLAGS = -static
musl-check: XRUN =
musl-check: XOUT = build/musl
musl-check:
	@$(call xcheck_need,musl-gcc,musl-tools)
	@$(XCHECK_RUN)
