#!/usr/bin/env bash
# The course's checks on the GPU machine (the device tool's H100), in few calls: what issue 14 asks to be run
# there, written down once so that a session spends its device minutes on runs, not on set-up.
#
# Here, once (the GPU machine has no package index; its python3 is 3.12 with torch, pytest and pytest-xdist):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl landlockpy==0.2.0 pytest-timeout==2.4.0
# Then one device call per verb, carrying .whl (carry: [".whl"]), each under the 10-minute limit:
#   bash benchmarks/gpu_session.sh test    # make test's pytest lines (no ruff, no notebooks: no jupyter there)
#   bash benchmarks/gpu_session.sh grade   # a timed solution grade (cold build folder) and the untouched stubs
# Everything is written under $OUT (logs come back; the reply holds each log's end).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/gpu-session-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

setup() {
  # Into python3's own site-packages, and the course on its path by a .pth file there: the grader's workers start
  # with `python -I`, which ignores PYTHONPATH but not .pth files (an editable install needs a recent setuptools).
  python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl \
    || { echo "gpu_session: no wheels in .whl/ (see this file's header)"; exit 2; }
  echo "$PWD" > "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cudacourse-checkout.pth"
  python3 -m cudacourse doctor > "$OUT/doctor.txt" 2>&1
  grep -i -A1 confine "$OUT/doctor.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  git log --oneline -1 | tee -a "$OUT/gpu.txt"
}

case "${1:-}" in
  test)
    setup
    s=$SECONDS
    # make test's two pytest lines, as the Makefile runs them on a GPU
    timeout 480 python3 -m pytest tests --impl=solution -q -n logical --dist loadgroup -m "not gpu" \
        --durations=25 -p no:cacheprovider > "$OUT/test_not_gpu.log" 2>&1
    echo "not gpu: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/test_not_gpu.log"
    s=$SECONDS
    timeout 100 python3 -m pytest tests --impl=solution -q -n 0 -m gpu --durations=40 -p no:cacheprovider \
        > "$OUT/test_gpu.log" 2>&1
    echo "gpu: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/test_gpu.log"
    ;;
  grade)
    setup
    bd=$(mktemp -d)
    R=$OUT bash benchmarks/grade_profile.sh solution "$bd" --impl solution
    s=$SECONDS
    CUDA_COURSE_BUILD=$(mktemp -d) timeout 120 python3 -m cudacourse grade --json "$OUT/stubs.json" \
        > "$OUT/stubs.log" 2>&1
    echo "stubs: rc $? in $((SECONDS - s)) s"; tail -2 "$OUT/stubs.log"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_session.sh test|grade   (on the GPU machine; see the header)"
    exit 2
    ;;
esac
