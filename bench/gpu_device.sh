#!/usr/bin/env bash
# Builds opt4store on a lent GPU machine and runs the CUDA checks and the GPU
# benchmark there (issue 5 part 5, issue 4's CUDA path).
#
#   bench/gpu_device.sh fetch              here: download the Debian packages
#                                          the build needs into .debs/
#   bench/gpu_device.sh build              there: unpack .debs/, build into
#                                          build-gpu/ against the machine's
#                                          python3 and its torch
#   bench/gpu_device.sh test               there: build, then the Python tests
#                                          (tests/python, test_device.py too)
#   bench/gpu_device.sh bench [ARGS...]    there: build, then bench/gpu_bench.py
#                                          ARGS (e.g. --models resnet50
#                                          --workers 0,8 --json $OUT/g1.json)
#
# The GPU machine (the `device` tool) reaches no package registry and has
# none of RocksDB, liburing, LZ4's headers or CLI11; it has CUDA, python3 with
# torch 2.x, timm, pybind11, CMake and a compiler. So `fetch` runs here and
# every call there carries the folder: run(carry=[".debs"], command=
# "bench/gpu_device.sh test"). .debs/ is git-ignored. The packages are
# Debian 12's, unpacked with dpkg -x into $DEPS (default /tmp/opt4store-deps)
# and found through CMAKE_PREFIX_PATH and LD_LIBRARY_PATH; nothing is
# installed into the machine's own folders.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=.debs
DEPS=${DEPS:-/tmp/opt4store-deps}
BUILD=${BUILD:-build-gpu}
PYTHON=${OPT4STORE_PYTHON:-python3}
# The build's own packages and their libraries that an Ubuntu or Debian
# image without them lacks (zlib, zstd, bz2 and lz4's runtime are common).
PACKAGES=(librocksdb-dev librocksdb7.8 libgflags2.2 libsnappy1v5 liburing-dev liburing2
          liblz4-dev liblz4-1 libcli11-dev catch2)

log() { printf '[gpu_device.sh] %s\n' "$*" >&2; }
die() { printf '[gpu_device.sh] error: %s\n' "$*" >&2; exit 1; }

fetch() {
  mkdir -p "$DEBS"
  (cd "$DEBS" && apt-get download "${PACKAGES[@]}")
  log "downloaded into $DEBS/: $(ls "$DEBS" | tr '\n' ' ')"
}

unpack() {
  ls "$DEBS"/*.deb >/dev/null 2>&1 || die "no $DEBS/*.deb: run 'bench/gpu_device.sh fetch' here and carry $DEBS"
  mkdir -p "$DEPS"
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$DEPS"; done
  export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

build() {
  unpack
  command -v cmake >/dev/null || die "no cmake on this machine"
  command -v c++ >/dev/null || die "no C++ compiler on this machine"
  "$PYTHON" -c 'import torch' || die "$PYTHON cannot import torch"
  local torch_prefix pybind_dir
  torch_prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  # pip's pybind11 (the GPU image has it); else whatever CMake finds.
  pybind_dir=$("$PYTHON" -m pybind11 --cmakedir 2>/dev/null || true)
  log "torch $("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)'), pybind11 $pybind_dir"
  # By name: the unpacked .pc files name /usr, and RocksDB's package config
  # wants the -dev packages of five compression libraries (tiers/CMakeLists.txt).
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$DEPS/usr;$torch_prefix;$pybind_dir" \
    -DOPT4STORE_FIND_DEPS_BY_NAME=ON \
    -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
    -DOPT4STORE_BUILD_BENCH=OFF >/dev/null
  cmake --build "$BUILD" -j "$(nproc)"
  export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
}

case "${1:-}" in
  fetch) fetch ;;
  build) build ;;
  test)
    build
    "$PYTHON" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"'
    OPT4STORE_BUILD_DIR="$PWD/$BUILD" "$PYTHON" -m pytest -q tests/python
    ;;
  bench)
    shift
    build
    "$PYTHON" bench/gpu_bench.py "$@"
    ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 64 ;;
esac
