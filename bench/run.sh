#!/usr/bin/env bash
# Runs opt4store's benchmark suite and prints a summary.
#
#   bench/run.sh BUILD_DIR [--quick]
#
# BUILD_DIR is a configured and built tree (./build.sh bench passes build/,
# a RelWithDebInfo build; a Release build gives the same figures within
# noise). The benchmarks are $BUILD_DIR/bench/{policy,memory,sizes,store}_bench
# and bench/python_bench.py (on the package in $BUILD_DIR/python)
# (store_bench needs about 0.7 GB of free disk under /var/tmp; see STORE.md).
#
# Full runs write bench/results/<bench>.json and <bench>.txt (what
# bench/README.md quotes). --quick runs small sizes, for a smoke test, and
# writes to bench/results/tmp/ (git-ignored) so that it never overwrites the
# full figures. A full run takes about 12 minutes on the 2-core machine.
#
# Exit status: 0 if every benchmark ran and every correctness check held
# (hits identical to the reference, OPT hits == capacity x (E-1) on
# shuffles, no policy above the exhaustive optimum); otherwise the first
# failing benchmark's status. A missed speed or memory goal is reported in
# the summary, and fails the run only with OPT4STORE_BENCH_ENFORCE=1.
set -uo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 64; }

[ $# -ge 1 ] || usage
BUILD_DIR=$1; shift
QUICK=()
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=(--quick) ;;
    -h|--help) usage ;;
    *) echo "run.sh: unknown argument $arg" >&2; usage ;;
  esac
done

BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=$BUILD_DIR/bench
if [ ${#QUICK[@]} -gt 0 ]; then
  OUT_DIR=$BENCH_SRC/results/tmp
else
  OUT_DIR=$BENCH_SRC/results
fi
mkdir -p "$OUT_DIR"

EXTRA=()
[ "${OPT4STORE_BENCH_ENFORCE:-0}" = 1 ] && EXTRA+=(--enforce-goals)

echo "opt4store benchmarks ${QUICK[*]:-(full)} from $BIN_DIR -> $OUT_DIR"
echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)," \
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
declare -A rc_of secs_of
BENCHES=(policy_bench memory_bench sizes_bench store_bench python_bench)
PYTHON=${OPT4STORE_PYTHON:-/usr/bin/python3}
for name in "${BENCHES[@]}"; do
  bin=$BIN_DIR/$name
  cmd=("$bin")
  if [ "$name" = python_bench ]; then
    # The Python package as the build left it in $BUILD_DIR/python.
    bin=$BUILD_DIR/python/opt4store/__init__.py
    cmd=(env "PYTHONPATH=$BUILD_DIR/python" "$PYTHON" "$BENCH_SRC/python_bench.py")
  fi
  rm -f "$OUT_DIR/$name.json" "$OUT_DIR/$name.txt"  # never report a stale run
  if [ ! -e "$bin" ]; then
    echo "run.sh: $bin not found; build it first (cmake --build $BUILD_DIR --target $name)" >&2
    rc_of[$name]=127
    [ $status -eq 0 ] && status=127
    continue
  fi
  echo
  echo "=== $name ${QUICK[*]}"
  start=$(date +%s)
  if [ "$name" = python_bench ]; then
    "${cmd[@]}" "${QUICK[@]}" --json "$OUT_DIR/$name.json" 2>&1 | grep -v -i 'warn' | tee "$OUT_DIR/$name.txt"
  else
    "${cmd[@]}" "${QUICK[@]}" "${EXTRA[@]}" --json "$OUT_DIR/$name.json" | tee "$OUT_DIR/$name.txt"
  fi
  rc=${PIPESTATUS[0]}
  secs_of[$name]=$(( $(date +%s) - start ))
  rc_of[$name]=$rc
  if [ "$rc" -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
done

echo
echo "=== summary ${QUICK[*]}"
for name in "${BENCHES[@]}"; do
  rc=${rc_of[$name]:-127}
  verdict=ok
  case "$rc" in
    0) ;;
    1) verdict="CORRECTNESS FAILURE (exit 1)" ;;
    2) verdict="GOAL MISSED (exit 2)" ;;
    127) verdict="NOT RUN" ;;
    *) verdict="ERROR (exit $rc)" ;;
  esac
  printf '%-13s %-30s %5ss\n' "$name" "$verdict" "${secs_of[$name]:--}"
  if [ -f "$OUT_DIR/$name.txt" ]; then
    grep -E '^(summary:|   opt vs reference|   FAILURE|FAILURE)' "$OUT_DIR/$name.txt" | sed 's/^ */    /'
  fi
done
echo "results: $OUT_DIR/*.json (and *.txt)"
exit $status
