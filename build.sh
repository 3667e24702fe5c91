#!/usr/bin/env bash
# opt4store's one entry point for a fresh Debian 12 machine.
#
#   ./build.sh demo    install what is missing, build, run the demo (bench/demo.py)
#   ./build.sh test    install what is missing, build, run every test
#                      (ctest and pytest on a normal build, clang's thread-safety
#                      analysis, then ctest on an ASan+UBSan build; those two
#                      builds compile in the background while ctest and pytest run)
#   ./build.sh setup   only install the Debian packages that are missing
#   ./build.sh build   setup, then build into build/
#   ./build.sh bench   setup, build, run the benchmark suite (bench/README.md)
#
# Every step is idempotent and non-interactive. Packages come from Debian's
# archive only; nothing is fetched from a Python registry.
set -euo pipefail
cd "$(dirname "$0")"

JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build}
ASAN_DIR=${ASAN_DIR:-build-asan}
TSA_DIR=${TSA_DIR:-build-tsa}

# Debian 12 packages the project builds and tests with.
PACKAGES=(
  build-essential cmake pkg-config clang-14
  librocksdb-dev liblz4-dev liburing-dev
  catch2 libcli11-dev nlohmann-json3-dev
  libtorch-dev python3-torch python3-torchvision pybind11-dev python3-dev
  python3-numpy python3-pytest python3-matplotlib python3-pil
  fio
)

# Each line with the UTC time: a CI log then shows where its minutes went.
log() { printf '[build.sh] %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[build.sh] error: %s\n' "$*" >&2; exit 1; }

setup() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  log "installing missing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: install ${missing[*]} by hand"
    sudo=(sudo -n)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq \
    || die "apt-get update failed; check the network to Debian's archive"
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || die "apt-get could not install: ${missing[*]}"
  for p in "${missing[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
      || die "package $p is still not installed after apt-get"
  done
}

# The interpreter whose torch the Python package builds against: Debian's
# /usr/bin/python3 (python3-torch), not whatever python3 comes first on PATH.
python_with_torch() {
  if [ -n "${OPT4STORE_PYTHON:-}" ]; then echo "$OPT4STORE_PYTHON"; return; fi
  for py in /usr/bin/python3 python3; do
    if "$py" -c 'import torch' >/dev/null 2>&1; then command -v "$py"; return; fi
  done
  echo /usr/bin/python3
}

configure_and_build() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPython_EXECUTABLE="$(python_with_torch)" "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

# -g1 (line tables: backtraces and perf still resolve) compiles about a
# third faster than -g on these 2 cores, and keeps the test command in time.
build() {  # extra cmake args...
  setup
  configure_and_build "$BUILD_DIR" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DOPT4STORE_UNITY_LIBRARIES=ON "$@"
}

# Where the test build's time goes (measured 2026-11-27, 2 shared cores, in
# CPU-seconds since the load varied from 1 to 12): compiling the -O2 test
# code, not linking (a test link: 0.2-0.5 CPU-s, ASan included). As one
# binary with catch.hpp precompiled (tests/CMakeLists.txt) the tests took
# 269 CPU-s instead of 303 as 40 binaries (normal build), 493 instead of 557
# (ASan); with the test code at -Og, 110 instead of 218 (quiet machine: 57 s
# wall instead of 111). ASan libraries and CLI: 541 CPU-s. ctest: 47 s
# (normal), 93 s (ASan).
# The two checking builds (clang's thread-safety analysis, then ASan+UBSan)
# compile at nice 19 while pytest runs: pytest mostly waits on its
# processes and timeouts, and the builds take what it leaves of the cores.
# In sequence the test command took 22.4 minutes here (CI=true, 2026-11-27:
# build 4.5, ctest 0.8, pytest 4.0, thread-safety 1.2, ASan build 10.0, its
# ctest 1.9); this way, 18.4 (pytest 3.6 beside the builds, then 7.3 more
# for them). Then (2026-11-27, CPU-s from /usr/bin/time at a load of 9 to
# 13 from other builds): the ASan libraries and CLI in unity batches, 355
# CPU-s instead of 554 file by file (at a load of 4 to 9, the same day; 541
# above); its tests then took 336, and its ctest passed all 335 tests
# (135+47 CPU-s). The thread-safety check as -fsyntax-only over 22 unity
# batches, configure included, 59 instead of 158 (configure, -O0 compile of
# 66 files, link, at the same load); tests/python/test_cluster.py with
# forked hosts, 82 instead of 181 (full pytest: 256 CPU-s). About 400
# CPU-s less, some 3 minutes of the 2 cores. A fresh clone's CI=true run
# then took 19.6 minutes, 1555 CPU-s, but its build 10.3 of them (another
# ASan build and other engineers' beside it, load 4 to 6); from the end of
# ctest on, at a load of 1 to 2.5: 8.6 minutes instead of 12.8 (pytest 2.3
# beside thread-safety 1.0 and the ASan build 5.4, its ctest 2.0).
# A fresh clone's run on a quiet machine: 16.4 minutes (2026-11-27
# 06:59-07:16 UTC), 14.3 with the thread-safety check in its own script
# (07:27-07:41). 2026-11-29, per file (/usr/bin/time as the compiler
# launcher, idle machine): the main build 633 CPU-s, of which the CLI 183
# (CLI11's inline code compiled in each command file), the extension 137
# (torch/extension.h parsed in each of its files), the libraries 97; the
# ASan build 642, of which its CLI's unity batches 189 (at -O1) and
# Catch2's runner 40. With the main build's libraries and CLI in unity
# batches too, torch's headers precompiled, the ASan CLI at -O0 and
# Catch2's runner uninstrumented, the test command took 13.5 minutes
# instead of 20.1 (fresh clones on a quiet machine, 02:52 and 03:48 UTC).
# Runs in the background: errors end it, and run_tests waits.
checking_builds() {
  renice -n 19 -p "$BASHPID" >/dev/null
  log "clang's thread-safety analysis (-Wthread-safety -Werror): the libraries, the CLI and the benchmarks"
  thread_safety_check
  log "the ASan+UBSan build"
  # The Python extension is left out here: an ASan module needs libasan
  # preloaded into the interpreter; the C++ tests cover the same store code.
  # -O1 -g1: ASan's usual setting, with assertions on (the test code itself
  # at -O0: tests/CMakeLists.txt). The libraries and the CLI in unity
  # batches (CMakeLists.txt), the tests file by file.
  configure_and_build "$ASAN_DIR" -DOPT4STORE_SANITIZE=ON -DOPT4STORE_BUILD_BENCH=OFF \
    -DOPT4STORE_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DOPT4STORE_UNITY_LIBRARIES=ON
}

# The analysis runs in clang's front end and nothing of this build is linked
# or run, so each translation unit of the libraries, the CLI (their unity
# batches) and the benchmarks goes through clang++ -fsyntax-only as CMake
# would compile it (compile_commands.json), JOBS at a time. -beta makes
# clang 14 check the declared lock orders (ACQUIRED_BEFORE). A violation
# planted in a unity batch (a GUARDED_BY member read without its mutex)
# fails it.
thread_safety_check() {
  CXX=clang++-14 cmake -S . -B "$TSA_DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_CXX_FLAGS="-Wthread-safety -Wthread-safety-beta -Werror=thread-safety" \
    -DOPT4STORE_BUILD_PYTHON=OFF -DOPT4STORE_BUILD_BENCH=ON -DOPT4STORE_BUILD_TESTS=OFF \
    -DOPT4STORE_UNITY_LIBRARIES=ON >/dev/null
  "$(python_with_torch)" tests/check_syntax_only.py "$TSA_DIR/compile_commands.json" "$JOBS"
}

run_tests() {
  # No test runs a C++ benchmark: here they go through the thread-safety
  # check's front end only (24 CPU-s, against 82 to compile them at -O2;
  # 2026-11-27), and ./build.sh bench builds them.
  build -DOPT4STORE_BUILD_BENCH=OFF
  # The checking builds start before ctest, whose tests wait on processes and
  # timeouts as pytest's do: the ASan build, which the run waits for last,
  # gets those minutes too (2026-11-29: it ended 4.3 minutes after pytest,
  # and the run took 19.95).
  local builds_log=$BUILD_DIR/checking-builds.log
  log "the thread-safety and ASan builds start in the background, at nice 19 ($builds_log)"
  checking_builds >"$builds_log" 2>&1 &
  local builds=$! pytest_status=0
  log "unit and CLI tests (RelWithDebInfo)"
  if ! ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"; then
    kill "$builds" 2>/dev/null || true
    die "ctest failed (above)"
  fi
  log "Python package tests (pytest, on the package built into $BUILD_DIR/python)"
  # With NumPy 1 (Debian 12's 1.24), under NumPy 2's promotion rules (NEP 50;
  # pip's torch 2.x brings NumPy 2), with an error, in the tests and their
  # child processes, wherever a result's dtype differs from NumPy 1's: one
  # run covers both. NumPy 2 has only its own rules (and warns from 2.2 on
  # that the variable is ignored), so it is set for NumPy 1 only.
  local numpy_rules=()
  if "$(python_with_torch)" -c 'import sys, numpy; sys.exit(numpy.__version__[0] != "1")'; then
    numpy_rules=(NPY_PROMOTION_STATE=weak_and_warn
                 PYTHONWARNINGS="error:result dtype changed:UserWarning")
  fi
  env "${numpy_rules[@]}" \
    PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" OPT4STORE_BUILD_DIR="$PWD/$BUILD_DIR" \
    "$(python_with_torch)" -m pytest -q -p no:cacheprovider tests/python || pytest_status=$?
  log "waiting for the thread-safety and ASan builds"
  if ! wait "$builds"; then
    tail -60 "$builds_log" >&2
    die "the thread-safety analysis or the ASan build failed (above; whole log: $builds_log)"
  fi
  grep -h '^\[build.sh\]' "$builds_log" >&2 || true
  [ "$pytest_status" -eq 0 ] || die "pytest failed (exit $pytest_status)"
  log "unit and CLI tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$JOBS"
}

demo() {
  build
  # A decode-bound JPEG dataset read plain and through the store, then a
  # restart (bench/demo.py); about 20 s on 2 cores.
  PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$(python_with_torch)" bench/demo.py "$@"
}

bench() {
  build -DOPT4STORE_BUILD_BENCH=ON
  bench/run.sh "$BUILD_DIR" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  setup) setup ;;
  build) build ;;
  test)  run_tests ;;
  demo)  demo "$@" ;;
  bench) bench "$@" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
