#!/usr/bin/env bash
# Runs the benchmark suite of issue 5 and regenerates the report.
#
#   bench/suite.sh BUILD_DIR [--quick] [--cxx]
#
# BUILD_DIR is a configured, built tree: the CLI is BUILD_DIR/tools/opt4store,
# the C++ benchmarks are BUILD_DIR/bench/*, and the Python package is
# BUILD_DIR/python (put on PYTHONPATH). In order:
#
#   1. bench/hitrate_lab.py   hit rates through `opt4store simulate`
#      bench/cluster_sim_bench.py  `opt4store simulate --hosts` for 8 to 256
#                             hosts on the ImageNet plan (about 5 minutes)
#   2. bench/python_bench.py  per-read overhead, DataLoader samples/s
#   3. ram_bench              the RAM tier against memcpy (bench/RAM.md)
#   4. disk_bench             the disk tier against fio, LZ4 on its data,
#                             write amplification (bench/DISK.md; needs fio
#                             and 4.3 GB free under /tmp, --quick 0.3 GB)
#   5. store_bench            the Store's prefetch against a reader at disk
#                             speed, RAM per id (bench/STORE.md)
#   6. bench/e2e_bench.py     end-to-end epoch times
#   7. bench/loader_bench.py  torch's DataLoader against opt4store.DataLoader
#   8. bench/ddp_bench.py     two DDP ranks sharing one store, against no
#                             cache and a store per rank
#   9. bench/gpu_bench.py     timm training on a GPU; without CUDA it records
#                             that it skipped (bench/gpu_device.sh)
#  10. bench/launch_bench.py  loading inline and on a background thread beside
#                             a launch-bound step, on the CPU
#  11. bench/report.py        bench/REPORT.md and bench/report/*.png
#
# About 15.5 minutes on the 2-core machine (disk_bench 3.5, e2e 3.6, store 1.3,
# loader 1, ddp 1.3, launch 2.5);
# --quick about 1.5. --cxx first adds the engine's benchmarks of issue 2
# (policy_bench, memory_bench, sizes_bench: about 9 more minutes), which
# bench/README.md quotes and the report does not.
#
# Full runs write bench/results/*.json (the C++ ones also their *.txt) and
# bench/REPORT.md. --quick is passed to every step, writes to
# bench/results/tmp/ (git-ignored) and its report to
# bench/results/tmp/REPORT.md, so it never overwrites the real figures.
# The interpreter is $OPT4STORE_PYTHON (default /usr/bin/python3).
#
# Exit status: 0 when every step succeeded, otherwise the first failing
# step's status (the report is still generated from what exists). A missed
# speed goal is printed and recorded, and is not a failure.
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

cxx_bench() {  # cxx_bench NAME [ARGS...]: BUILD_DIR/bench/NAME -> OUT_DIR/NAME.{json,txt}
  local name=$1; shift
  rm -f "$OUT_DIR/$name.json" "$OUT_DIR/$name.txt"  # never report a stale run
  if [ ! -x "$BUILD_DIR/bench/$name" ]; then
    echo "suite.sh: $BUILD_DIR/bench/$name not built (./build.sh bench builds the benchmarks;" \
         "./build.sh test leaves them out)" >&2
    return 127
  fi
  "$BUILD_DIR/bench/$name" "${QUICK[@]}" "$@" --json "$OUT_DIR/$name.json" | tee "$OUT_DIR/$name.txt"
  return "${PIPESTATUS[0]}"
}

if [ $CXX -eq 1 ]; then
  for name in policy_bench memory_bench sizes_bench; do step "$name" cxx_bench "$name"; done
fi

step hitrate_lab "$PYTHON" "$BENCH_SRC/hitrate_lab.py" "${QUICK[@]}" --cli "$CLI" \
  --json "$OUT_DIR/hitrate_lab.json"
step cluster_sim "$PYTHON" "$BENCH_SRC/cluster_sim_bench.py" "${QUICK[@]}" --cli "$CLI" \
  --json "$OUT_DIR/cluster_sim.json"

python_bench() {  # -> OUT_DIR/python_bench.{json,txt}, as run.sh writes them
  rm -f "$OUT_DIR/python_bench.json" "$OUT_DIR/python_bench.txt"  # never report a stale run
  "$PYTHON" "$BENCH_SRC/python_bench.py" "${QUICK[@]}" --json "$OUT_DIR/python_bench.json" 2>&1 |
    grep -v -i 'warn' | tee "$OUT_DIR/python_bench.txt"
  return "${PIPESTATUS[0]}"
}
step python_bench python_bench

step ram_bench cxx_bench ram_bench
step disk_bench cxx_bench disk_bench
step store_bench cxx_bench store_bench

# scratch_step NAME: runs bench/NAME.py in a scratch directory of its own
# (so that a concurrent run of it, whose default folder is fixed, cannot
# delete this run's store), writing $OUT_DIR/<NAME without _bench>.json.
scratch_step() {
  local name=$1 dir
  dir=$(mktemp -d "/var/tmp/opt4store-suite-$name.XXXXXX")  # XXXXXX: mktemp fills it in
  step "$name" "$PYTHON" "$BENCH_SRC/$name.py" "${QUICK[@]}" --dir "$dir" \
    --json "$OUT_DIR/${name%_bench}.json"
  rm -rf -- "$dir"
}
scratch_step e2e_bench
scratch_step loader_bench
scratch_step ddp_bench

# Without CUDA it records why it skipped (or keeps an earlier GPU machine's
# results); bench/gpu_device.sh runs it on a lent GPU machine.
step gpu_bench "$PYTHON" "$BENCH_SRC/gpu_bench.py" "${QUICK[@]}" --json "$OUT_DIR/gpu_bench.json"
step launch_bench "$PYTHON" "$BENCH_SRC/launch_bench.py" "${QUICK[@]}" --json "$OUT_DIR/launch.json"

step report "$PYTHON" "$BENCH_SRC/report.py" --results "$OUT_DIR" --out "$REPORT"
echo
echo "report: $REPORT (exit status $status)"
exit $status
