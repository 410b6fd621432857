#!/usr/bin/env bash
# Lesson 09's run on the GPU machine (issue 41), ONE device call (its budget: 250 s of device time, machine start
# included): the lesson's tests with the solutions (the big sizes and the four speed tasks, judged by
# cudacourse.speed), `make bench` of the lesson alone, which kernels PyTorch runs for the references, and the scan's
# tile shapes. Everything lands in $OUT/gpu_scan.tgz (one file: the device tool brings back at most 8).
#
# Here: commit, then export the commit beside /work/main's tree and call the device tool from there:
#   mkdir -p /work/main/.dev-scan && git archive HEAD | tar -x -C /work/main/.dev-scan \
#     && git rev-parse --short HEAD > /work/main/.dev-scan/COMMIT
#   run(command="cd .dev-scan && bash benchmarks/gpu_scan.sh", carry=[".dev-scan"], timeout_s=170)
# (`bash benchmarks/gpu_scan.sh second`: the same without the routes, for a second call after a change;
#  `bash benchmarks/gpu_scan.sh twins`: the Triton twins' tests and the 9.7 speed test, the scan's shapes
#  (benchmarks/scan_sweep.py) and the twins' times (benchmarks/scan_twins_time.py), ~150 s)
# There: python3 3.12 with torch, pytest, matplotlib; no make, no venv, no git checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/gpu-scan-out}"
R="$OUT/r"
mkdir -p "$R"
export PYTHONUNBUFFERED=1
ln -sfn "$PWD/cudacourse" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cudacourse"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat COMMIT 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -1
} > "$R/machine.txt" 2>&1
cat "$R/machine.txt"
pack() { tar -czf "$OUT/gpu_scan.tgz" -C "$OUT" r; }

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $R/NAME.log, say how it ended
  local name=$1 limit=$2; shift 2
  local s=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  echo "$name: rc $? in $((SECONDS - s)) s"
  pack
}

if [ "${1:-}" = twins ]; then  # (wave 2 of issue 41: the Triton twins' tests, the scan's shapes, the twins' times)
  CUDA_COURSE_TRITON_ONE_CONFIG=1 step tests_triton 60 python3 -m pytest tests/test_09_scan_sort.py --impl=solution \
      -v -n 0 -p no:cacheprovider -p no:randomly -rfE --durations=10 -k "triton or speed_scan"
  tail -30 "$R/tests_triton.log"
  step sweep 45 python3 benchmarks/scan_sweep.py
  cat "$R/sweep.log"
  step twins 45 python3 benchmarks/scan_twins_time.py
  cat "$R/twins.log"
  exit 0
fi
step tests 50 python3 -m pytest tests/test_09_scan_sort.py --impl=solution -v -n 0 -p no:cacheprovider -p no:randomly \
    -rfE --durations=15
tail -25 "$R/tests.log"
step bench 40 python3 -m cudacourse bench --lessons 09_scan_sort --out "$R/bench"
grep -E "^\| (scan|histogram|sort|sample)" "$R/bench.log" | cut -c1-170
if [ "${1:-}" != second ]; then  # (the second call of issue 41 skipped the routes: the first had them)
  step routes 15 python3 benchmarks/scan_sort_routes.py
fi
step sweep 25 python3 benchmarks/scan_sweep.py
cat "$R/sweep.log"
