#!/usr/bin/env bash
# Issue 42 on the GPU machine in one device call (a budget of 150 s): lesson 07's caching allocator (tasks
# 7.8-7.11) and the speed judge of tasks 7.5 and 7.6. Run from the course's top folder there (python3 with torch
# and pytest, no venv, no make), as the device tool's commands run (root):
#   ALLOC_BENCH_COMMIT="$(git log -1 --format='%h %s')" bash benchmarks/gpu_alloc.sh
# In order: the course linked into site-packages (as benchmarks/gpu_speed.sh does); allocator.cu and host_side.cu
# built in parallel; benchmarks/alloc_bench.py --only plugged (lesson 06's capstone step on three allocators, each
# in a fresh process, alone on the GPU); then tests/test_07_host_side.py --impl=solution, with
# alloc_bench.py --only fragmentation beside it (trace replays: host work and allocations, no kernels).
# Writes under $OUT (8 files come back): gpu_alloc.log (this script's lines, the probes, the plugged run),
# test_07.log, alloc_fragmentation.md/.json, alloc_fragmenting.png, alloc_growing_batch.png, alloc_plugged.md/.json.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/gpu-alloc-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/gpu_alloc.log"
log() { echo "[$((SECONDS))s] $*" | tee -a "$LOG"; }

ln -sfn "$PWD/cudacourse" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cudacourse"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee -a "$LOG"
log "commit: ${ALLOC_BENCH_COMMIT:-unknown}"

build() {
  python3 -c "from cudacourse import settings; settings.configure(impl='solution'); import cudacourse as cc; \
cc.lesson('07_host_side').module('$1')" >> "$OUT/build_$1.txt" 2>&1 && echo "built $1" || echo "BUILD FAILED $1"
}
build allocator.cu | tee -a "$LOG" &
build host_side.cu | tee -a "$LOG" &
wait
log "builds done"

timeout 70 python3 benchmarks/alloc_bench.py --out "$OUT" --only plugged --steps 10 >> "$LOG" 2>&1
log "plugged: rc $?"

timeout 90 python3 benchmarks/alloc_bench.py --out "$OUT" --only fragmentation >> "$OUT/frag.txt" 2>&1 &
frag=$!
timeout 200 python3 -m pytest tests/test_07_host_side.py --impl=solution -q -n 0 -p no:cacheprovider -rfE \
    > "$OUT/test_07.log" 2>&1
log "pytest test_07: rc $?"
wait "$frag"
log "fragmentation: rc $?"
cat "$OUT/frag.txt" "$OUT"/build_*.txt >> "$LOG" 2>/dev/null
rm -f "$OUT/frag.txt" "$OUT"/build_*.txt
tail -25 "$OUT/test_07.log"
