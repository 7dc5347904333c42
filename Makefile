# Small targets for the daily loop.  The extension is built in place so that
# `import pywheel` from this folder is always the fresh build.
PYTHON ?= python3
CC ?= cc
CORE = csrc/core
BINDING = csrc/binding
CFLAGS_C = -std=c11 -O2 -g -Wall -Wextra -Werror -I$(CORE)
SAN = -fsanitize=address,undefined -fno-omit-frame-pointer
LIBASAN = $(shell $(CC) -print-file-name=libasan.so)

.PHONY: build test test-c tsan sanitize valgrind demo bench parity lint fmt clean \
  warnings stubtest dist test-installed test-sdist real-bugs forky parity-forky bench-forky \
  parity-uvloop

build:
	$(PYTHON) setup.py -q build_ext --inplace

test: build
	$(PYTHON) -m pytest -q

test-c:
	mkdir -p build
	$(CC) $(CFLAGS_C) -o build/test_wheel $(CORE)/test_wheel.c $(CORE)/wheel.c
	$(CC) $(CFLAGS_C) -o build/test_driver $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c -lpthread
	$(CC) $(CFLAGS_C) -o build/test_slab $(CORE)/test_slab.c $(CORE)/slab.c
	./build/test_wheel 1 && ./build/test_wheel 2 && ./build/test_driver && ./build/test_slab

# The driver's C test under ThreadSanitizer.
tsan:
	mkdir -p build
	$(CC) $(CFLAGS_C) -O1 -fsanitize=thread -o build/test_driver_tsan \
	  $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c -lpthread
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
	$(CC) $(CFLAGS_C) -o build/test_driver $(CORE)/test_driver.c $(CORE)/driver.c $(CORE)/wheel.c -lpthread
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

# The same suites on uvloop and on pywheel.uvloop (uvloop, from PyPI, is the oracle).
parity-uvloop: build
	$(PYTHON) tests/parity/parity.py --uvloop

# The full side-by-side run (tens of minutes); --quick takes about a minute.
bench: build
	$(PYTHON) -m benchmarks --out benchmarks/results
	$(PYTHON) -m benchmarks.asyncio_timeouts

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

clean:
	rm -rf build dist *.egg-info pywheel/*.so
