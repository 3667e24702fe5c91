#!/usr/bin/env bash
# Runs the Python-driven benchmark suite and regenerates the report.
#
#   bench/suite.sh BUILD_DIR [--quick] [--cxx]
#
# BUILD_DIR is a configured, built tree: the CLI is BUILD_DIR/tools/opt4store
# and the Python package is BUILD_DIR/python (put on PYTHONPATH). In order:
#
#   1. bench/hitrate_lab.py   hit rates through `opt4store simulate`
#   2. bench/python_bench.py  per-read overhead, DataLoader samples/s
#                             (with --cxx, bench/run.sh runs it instead)
#   3. bench/e2e_bench.py     end-to-end epoch times, if that script exists
#   4. bench/gpu_bench.py     timm training on a GPU; without CUDA it records
#                             that it skipped (bench/gpu_device.sh)
#   5. bench/report.py        bench/REPORT.md and bench/report/*.png
#
# --cxx first runs bench/run.sh BUILD_DIR (policy, memory, sizes and store
# benchmarks, about 12 minutes) so store_bench.json is fresh too; without it
# the report uses whatever store_bench.json is already in the results.
#
# Full runs write bench/results/*.json and bench/REPORT.md. --quick is
# passed to every step, writes to bench/results/tmp/ (git-ignored) and its
# report to bench/results/tmp/REPORT.md, so it never overwrites the real
# figures. The interpreter is $OPT4STORE_PYTHON (default /usr/bin/python3).
#
# Exit status: 0 when every step succeeded, otherwise the first failing
# step's status (the report is still generated from what exists).
set -uo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 64; }

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || { echo "suite.sh: no directory $1" >&2; exit 64; }
shift
QUICK=()
CXX=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=(--quick) ;;
    --cxx) CXX=1 ;;
    -h|--help) usage ;;
    *) echo "suite.sh: unknown argument $arg" >&2; usage ;;
  esac
done

BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
PYTHON=${OPT4STORE_PYTHON:-/usr/bin/python3}
CLI=$BUILD_DIR/tools/opt4store
if [ ${#QUICK[@]} -gt 0 ]; then
  OUT_DIR=$BENCH_SRC/results/tmp
  REPORT=$OUT_DIR/REPORT.md
else
  OUT_DIR=$BENCH_SRC/results
  REPORT=$BENCH_SRC/REPORT.md
fi
mkdir -p "$OUT_DIR"
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"

status=0
step() {  # step NAME COMMAND...: runs it, records the first failure
  local name=$1; shift
  echo
  echo "=== $name ${QUICK[*]}"
  local start rc
  start=$(date +%s)
  "$@"
  rc=$?
  echo "--- $name: exit $rc, $(( $(date +%s) - start )) s"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
}

echo "opt4store suite ${QUICK[*]:-(full)}: $BUILD_DIR -> $OUT_DIR"
echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"

if [ $CXX -eq 1 ]; then
  step run.sh "$BENCH_SRC/run.sh" "$BUILD_DIR" "${QUICK[@]}"
fi

step hitrate_lab "$PYTHON" "$BENCH_SRC/hitrate_lab.py" "${QUICK[@]}" --cli "$CLI" \
  --json "$OUT_DIR/hitrate_lab.json"

if [ $CXX -eq 0 ]; then
  rm -f "$OUT_DIR/python_bench.json"  # never report a stale run
  step python_bench "$PYTHON" "$BENCH_SRC/python_bench.py" "${QUICK[@]}" \
    --json "$OUT_DIR/python_bench.json"
fi

if [ -f "$BENCH_SRC/e2e_bench.py" ]; then
  # A scratch directory of its own, so that a concurrent e2e run (the default
  # is a fixed /var/tmp/opt4store-e2e) cannot delete this run's store.
  E2E_DIR=$(mktemp -d /var/tmp/opt4store-suite-e2e.XXXXXX)
  step e2e_bench "$PYTHON" "$BENCH_SRC/e2e_bench.py" "${QUICK[@]}" --dir "$E2E_DIR" \
    --json "$OUT_DIR/e2e.json"
  rm -rf -- "$E2E_DIR"
else
  echo
  echo "=== e2e_bench: bench/e2e_bench.py not present, skipped"
fi

# Without CUDA it records why it skipped (or keeps an earlier GPU machine's
# results); bench/gpu_device.sh runs it on a lent GPU machine.
step gpu_bench "$PYTHON" "$BENCH_SRC/gpu_bench.py" "${QUICK[@]}" --json "$OUT_DIR/gpu_bench.json"

step report "$PYTHON" "$BENCH_SRC/report.py" --results "$OUT_DIR" --out "$REPORT"
echo
echo "report: $REPORT (exit status $status)"
exit $status
