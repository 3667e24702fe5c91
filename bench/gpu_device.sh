#!/usr/bin/env bash
# Builds opt4store on a lent GPU machine, checks it there, and runs the GPU
# benchmark (issue 17).
#
#   bench/gpu_device.sh fetch [SKBUILD_SRC]  here: download the Debian packages
#                                            the build needs into .debs/; with
#                                            SKBUILD_SRC (a scikit-build-core
#                                            source tree) copy it there too,
#                                            for the pip check
#   bench/gpu_device.sh build                there: unpack .debs/, build into
#                                            $BUILD (default build-gpu) against
#                                            the machine's python3 and its torch
#   bench/gpu_device.sh check                there: build and run the C++
#                                            tests, beside them
#                                            tests/pip_install_check.sh (pip
#                                            install, then the Python tests
#                                            with the CUDA ones against the
#                                            installed package; a GPU is
#                                            required); fails on any failure
#   bench/gpu_device.sh cuda                 there: build (or reuse the build),
#                                            then the Python test files that
#                                            hold CUDA tests, against the
#                                            build tree (under a minute after
#                                            the build: for a lease too short
#                                            for check beside measure)
#   bench/gpu_device.sh bench [ARGS...]      there: build, then bench/gpu_bench.py
#                                            ARGS (e.g. --models resnet50
#                                            --workers 0,8 --json $OUT/g1.json)
#   bench/gpu_device.sh all DIR [IMAGES]     there, for a short lease: build,
#                                            then the checks of `check` (each
#                                            run to its end, niced, in the
#                                            background) beside the benchmark
#                                            (standard: three models, 0
#                                            workers; resnet50, 8 workers;
#                                            heavy), IMAGES images (default
#                                            400), no_cache and opt + disk;
#                                            logs and a JSON file per part
#                                            into DIR (join them here with
#                                            gpu_bench.py --merge ... --note)
#   bench/gpu_device.sh measure DIR [IMAGES] there: build (or reuse check's
#                                            build on a warm machine), then the
#                                            parts of `all`'s benchmark alone,
#                                            nothing beside them (the figures
#                                            to report); 404 s after check's
#                                            build (H200, 400 images,
#                                            2026-11-28; check took 323 s),
#                                            before the paired part took a
#                                            floor pass per epoch and two more
#                                            transfers (about 60 s more, an
#                                            estimate: check + measure + the
#                                            start, about 830 of a lease's 900)
#
# The GPU machine (the `device` tool) reaches no package registry and has
# none of RocksDB, liburing, LZ4's headers, CLI11 or nlohmann-json; it has CUDA, python3 with
# torch 2.x, timm, pybind11, CMake and a compiler. So `fetch` runs here and
# every call there carries the folder: run(carry=[".debs"], command=
# "bench/gpu_device.sh check"). .debs/ is git-ignored. The packages are
# Debian 12's, unpacked with dpkg -x into $DEPS (default /tmp/opt4store-deps)
# and found through CMAKE_PREFIX_PATH and LD_LIBRARY_PATH; nothing is
# installed into the machine's own folders.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=.debs
DEPS=${DEPS:-/tmp/opt4store-deps}
BUILD=${BUILD:-build-gpu}
case "$BUILD" in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
PYTHON=${OPT4STORE_PYTHON:-python3}
# The build's own packages and their libraries that an Ubuntu or Debian
# image without them lacks (zlib, zstd, bz2 and lz4's runtime are common);
# python3-pathspec is scikit-build-core's one dependency that pip
# environments often lack.
PACKAGES=(librocksdb-dev librocksdb7.8 libgflags2.2 libsnappy1v5 liburing-dev liburing2
          liblz4-dev liblz4-1 libcli11-dev nlohmann-json3-dev catch2 python3-pathspec)

# Each line with the UTC time: a lease's log then shows where its minutes went.
log() { printf '[gpu_device.sh] %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[gpu_device.sh] error: %s\n' "$*" >&2; exit 1; }

fetch() {
  mkdir -p "$DEBS"
  (cd "$DEBS" && apt-get download "${PACKAGES[@]}")
  if [ -n "${1:-}" ]; then
    [ -d "$1/src/scikit_build_core" ] || die "$1 is not a scikit-build-core source tree"
    rm -rf "$DEBS/scikit-build-core" && cp -r "$1/src" "$DEBS/scikit-build-core"
  fi
  log "downloaded into $DEBS/: $(ls "$DEBS" | tr '\n' ' ')"
}

unpack() {
  [ -z "${UNPACKED:-}" ] || return 0
  UNPACKED=1
  ls "$DEBS"/*.deb >/dev/null 2>&1 || die "no $DEBS/*.deb: run 'bench/gpu_device.sh fetch' here and carry $DEBS"
  mkdir -p "$DEPS"
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$DEPS"; done
  export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
  # CLI11, nlohmann-json and Catch2 are header-only; the libraries are found
  # by file name, since the unpacked .pc files name /usr and RocksDB's
  # package config wants the -dev packages of five compression libraries
  # (tiers/CMakeLists.txt).
  export CMAKE_ARGS="-DOPT4STORE_FIND_DEPS_BY_NAME=ON${CMAKE_ARGS:+ $CMAKE_ARGS}"
}

build() {
  unpack
  command -v cmake >/dev/null || die "no cmake on this machine"
  command -v c++ >/dev/null || die "no C++ compiler on this machine"
  "$PYTHON" -c 'import torch' || die "$PYTHON cannot import torch"
  log "torch $("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)'), cmake $(cmake --version | head -1)"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of -D flags
  # Each step checked: `set -e` does not act inside a function called
  # before || (as `all` calls this one).
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo $CMAKE_ARGS \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
    -DOPT4STORE_BUILD_BENCH=OFF >/dev/null || die "cmake could not configure $BUILD"
  cmake --build "$BUILD" -j "$(nproc)" || die "the build in $BUILD failed"
  export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
}

cpp_tests() {
  ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
}

# pytest's options for a lease: a hung test fails after 240 s instead of
# holding it, and with pytest-xdist the tests run in parallel (they mostly
# wait on child processes, so half the cores is enough workers).
pytest_opts() {
  "$PYTHON" -c 'import pytest_timeout' 2>/dev/null && printf -- '--timeout 240 '
  "$PYTHON" -c 'import xdist' 2>/dev/null && printf -- '-n %d ' "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))"
  printf -- '-rfE'
}

python_tests() {
  # shellcheck disable=SC2046  # pytest_opts is a list of options
  OPT4STORE_BUILD_DIR="$BUILD" "$PYTHON" -m pytest -q -p no:cacheprovider $(pytest_opts) tests/python
}

pip_check() {
  local skb=$DEBS/scikit-build-core pathspec
  pathspec=$(ls -d "$DEPS"/usr/lib/python3/dist-packages 2>/dev/null || true)
  # A temporary folder of its own: it may run beside the other Python tests.
  export PYTEST_ADDOPTS="--basetemp=/tmp/opt4store-pip-pytest $(pytest_opts)${PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}"
  if [ -d "$skb" ]; then
    PYTHONPATH="$PWD/$skb:$pathspec" tests/pip_install_check.sh "$(command -v "$PYTHON")"
  else
    PYTHONPATH="$pathspec" tests/pip_install_check.sh "$(command -v "$PYTHON")"
  fi
}

check() {
  unpack
  "$PYTHON" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"' \
    || die "$PYTHON's torch sees no CUDA device"
  # The Python tests run once, against the pip-installed package from
  # another folder (tests/pip_install_check.sh), the CUDA ones included:
  # that covers both the Python tests on this torch and `pip install .`.
  # It builds and tests beside the build of the C++ tests, so that check and
  # then measure fit one 15-minute lease (a check that ran the Python tests
  # twice at once, the build tree's and the installed package's, one test at
  # a time, was cut off by its 430 s limit on an H200 with 385 of 631 done).
  local pip_log=/tmp/opt4store-pip-check.log pip cpp_status=0 pip_status=0
  log "pip install --no-build-isolation . and the Python tests against it, beside the build ($pip_log)"
  pip_check >"$pip_log" 2>&1 &
  pip=$!
  build
  log "C++ tests"
  cpp_tests || cpp_status=$?
  log "C++ tests done (exit $cpp_status); waiting for the pip check"
  wait "$pip" || pip_status=$?
  log "the pip check's end:"
  tail -"$([ "$pip_status" -eq 0 ] && echo 4 || echo 60)" "$pip_log" >&2
  [ "$cpp_status" -eq 0 ] || die "the C++ tests failed (exit $cpp_status)"
  [ "$pip_status" -eq 0 ] || die "the pip check failed (exit $pip_status)"
}

# build, its output in a log shown only when it fails.
quiet_build() {
  build >/tmp/opt4store-gpu-build.log 2>&1 \
    || { tail -40 /tmp/opt4store-gpu-build.log; die "build failed"; }
}

# The benchmark's parts: one results file per part, most wanted first, so
# that a lease cut short still brings back whole parts (gpu_bench.py --merge
# joins them).
bench_parts() {
  local dir=$1 images=$2 failed=0
  local run=("$PYTHON" bench/gpu_bench.py --dir /var/tmp/opt4store-gpu --images "$images"
             --configs no_cache,opt_disk_prefetch)
  part() { "${run[@]}" "$@" || failed=1; }
  {
    part --settings standard --models resnet50 --workers 0 --json "$dir/resnet50-0.json"
    part --settings standard --models resnet50 --workers 8 --json "$dir/resnet50-8.json"
    part --heavy --json "$dir/heavy.json"
    part --settings standard --models mobilenetv3_small_100 --workers 0 \
      --json "$dir/mobilenet-0.json"
    part --settings standard --models vit_base_patch16_224 --workers 0 --json "$dir/vit-0.json"
  } >"$dir/bench.log" 2>&1
  [ "$failed" -eq 0 ] || log "a part of the benchmark failed (bench.log)"
  return "$failed"
}

# The benchmark's parts alone: figures not shared with the tests' CPU and
# disk load (the one `all` so far shared them, load 12-16 on 16 cores).
measure() {
  local dir=${1:?usage: bench/gpu_device.sh measure DIR [IMAGES]} images=${2:-400}
  mkdir -p "$dir"
  quiet_build
  log "load average before the benchmark: $(cut -d' ' -f1-3 /proc/loadavg)"
  local status=0
  bench_parts "$dir" "$images" || status=$?
  tail -5 "$dir/bench.log"
  return "$status"
}

# Everything a lease of about ten minutes allows, in one command. The checks
# run at nice 19 so that the benchmark, at nice 0 on the other cores, keeps
# the CPU it needs; both share the GPU for the few CUDA tests.
all() {
  local dir=${1:?usage: bench/gpu_device.sh all DIR [IMAGES]} images=${2:-400}
  mkdir -p "$dir"
  quiet_build
  (
    set +e
    renice -n 19 -p "$BASHPID" >/dev/null
    cpp_tests >"$dir/tests.log" 2>&1
    echo "ctest exit $?" >>"$dir/tests.log"
    python_tests >>"$dir/tests.log" 2>&1
    echo "pytest exit $?" >>"$dir/tests.log"
  ) &
  local tests=$!
  (
    set +e
    renice -n 19 -p "$BASHPID" >/dev/null
    pip_check >"$dir/pip.log" 2>&1
    echo "pip_install_check exit $?" >>"$dir/pip.log"
  ) &
  local pip=$!
  bench_parts "$dir" "$images" || true  # the parts that ran are kept; the logs say
  wait "$tests" "$pip" || true
  grep -h -E 'exit [0-9]+$' "$dir"/tests.log "$dir"/pip.log
}

case "${1:-}" in
  fetch) shift; fetch "$@" ;;
  build) build ;;
  check) check ;;
  all) shift; all "$@" ;;
  measure) shift; measure "$@" ;;
  cuda)
    build
    # shellcheck disable=SC2046  # pytest_opts and the file list are lists
    OPT4STORE_BUILD_DIR="$BUILD" "$PYTHON" -m pytest -q -p no:cacheprovider $(pytest_opts) \
      $(grep -l 'torch.cuda.is_available' tests/python/test_*.py)
    ;;
  bench)
    shift
    build
    "$PYTHON" bench/gpu_bench.py "$@"
    ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 64 ;;
esac
