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
#   bash benchmarks/gpu_session.sh grade   # the torch worker's GPU tests, a timed solution grade (cold build folder)
#                                          # and the untouched stubs
#   bash benchmarks/gpu_session.sh hostile # the attack and confinement tests as an ordinary user (ccuser)
#   bash benchmarks/gpu_session.sh attacks # the attack tests alone, as that user
#   bash benchmarks/gpu_session.sh corpus  # the grader corpus on cuda as that user (about 320 s)
#   bash benchmarks/gpu_session.sh only tests/a.py::b ...  # chosen tests, as root (as make test runs them)
#   bash benchmarks/gpu_session.sh final [sass]  # a session's closing checks in one call (about 4 minutes): a
#                                          # cold solution grade of lessons 01-07 (issue 35's figure), one of lessons
#                                          # 08-09, every backend route (issue 36), and with `sass` the SASS the sass
#                                          # verb shows against what ran (issue 39); all of it also in final.tgz
# Everything is written under $OUT (logs come back; the reply holds each log's end).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/gpu-session-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

setup() {
  # Into python3's own site-packages, and the course package linked there, as an editable install would find it
  # (that needs a recent setuptools): the grader's workers start with `python -I`, which ignores PYTHONPATH, and
  # may read cudacourse/ but not list the checkout's root (so a .pth naming the root finds nothing in a worker).
  python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl \
    || { echo "gpu_session: no wheels in .whl/ (see this file's header)"; exit 2; }
  ln -sfn "$PWD/cudacourse" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cudacourse"
  # The device tool copies the working tree beside the .git of the session's start: files added since were not in
  # its index, and tests that copy the course with `git ls-files` (the hostile corpus) left them out (2026-11-28)
  git add -A >/dev/null 2>&1
  python3 -m cudacourse doctor > "$OUT/doctor.txt" 2>&1
  grep -i -A1 confine "$OUT/doctor.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  git log --oneline -1 | tee -a "$OUT/gpu.txt"
}

source "$(dirname "$0")/gpu_common.sh"  # as_ccuser: an ordinary user, so that the confinement applies in full

case "${1:-}" in
  only)
    # chosen tests, as make test runs them here (as root): bash benchmarks/gpu_session.sh only tests/a.py::b ...
    setup
    shift
    timeout 400 python3 -m pytest --impl=solution -v -p no:cacheprovider "$@" > "$OUT/only.log" 2>&1
    echo "only: rc $?"; tail -15 "$OUT/only.log"
    ;;
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
    # first the torch worker's GPU tests (a torch-route file and learner Python in a worker with a CUDA context of
    # its own), as the ordinary user so that the worker is fully confined (about 40 s)
    as_ccuser
    s=$SECONDS
    as_user "timeout 150 python3 -m pytest -p no:cacheprovider tests/test_torch_worker.py -k on_a_gpu \
        --impl=solution -q -n 0 -rfs --basetemp=/tmp/ccuser-pt3" > "$OUT/torch_worker_gpu_ccuser.log" 2>&1
    echo "torch worker on the GPU as ccuser: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/torch_worker_gpu_ccuser.log"
    bd=$(mktemp -d)
    R=$OUT bash benchmarks/grade_profile.sh solution "$bd" --impl solution
    s=$SECONDS
    CUDA_COURSE_BUILD=$(mktemp -d) timeout 120 python3 -m cudacourse grade --json "$OUT/stubs.json" \
        > "$OUT/stubs.log" 2>&1
    echo "stubs: rc $? in $((SECONDS - s)) s"; tail -2 "$OUT/stubs.log"
    ;;
  hostile)
    # the attack, confinement and torch-worker tests as an ordinary user
    setup
    as_ccuser
    as_user "python3 -m cudacourse doctor 2>&1 | grep -i -A1 'grading confinement'" | tee "$OUT/doctor_ccuser.txt"
    s=$SECONDS
    as_user "timeout 330 python3 -m pytest -p no:cacheprovider tests/test_grader_attacks.py tests/test_confine.py \
        tests/test_torch_worker.py --impl=solution -q -n 8 --dist loadgroup -rfs --basetemp=/tmp/ccuser-pt" \
        > "$OUT/hostile_ccuser.log" 2>&1
    echo "attacks, confinement, torch worker as ccuser: rc $? in $((SECONDS - s)) s"; tail -4 "$OUT/hostile_ccuser.log"
    ;;
  attacks)
    # the hostile corpus alone (tests/attacks/, graded in one batch), as an ordinary user: the part of 'hostile' that
    # a session short of device time runs first
    setup
    as_ccuser
    s=$SECONDS
    # (timeout: the batch grade alone took 390 s on a 2-core machine; 200 s was too little on the H100 on 2026-11-28)
    as_user "timeout 480 python3 -m pytest -p no:cacheprovider tests/test_grader_attacks.py --impl=solution -v -s -n 4 \
        --dist loadgroup -rfs --durations=5 --basetemp=/tmp/ccuser-pt4" > "$OUT/attacks_ccuser.log" 2>&1
    echo "attacks as ccuser: rc $? in $((SECONDS - s)) s"; tail -4 "$OUT/attacks_ccuser.log"
    ;;
  corpus)
    # the grader corpus (known-buggy kernels, each with its verdict) graded on the GPU, as an ordinary user
    setup
    as_ccuser
    s=$SECONDS
    as_user "CUDA_COURSE_BACKEND=cuda timeout 540 python3 -m pytest -p no:cacheprovider tests/test_grader.py::test_corpus \
        --impl=solution -q -n 0 -rfs --tb=short --basetemp=/tmp/ccuser-pt2" > "$OUT/corpus_cuda_ccuser.log" 2>&1
    echo "grader corpus on cuda as ccuser: rc $? in $((SECONDS - s)) s"; tail -4 "$OUT/corpus_cuda_ccuser.log"
    ;;
  final)
    setup
    bd=$(mktemp -d)
    R=$OUT bash benchmarks/grade_profile.sh solution_01_07 "$bd" --impl solution \
        --lessons 01_relu 02_reduce 03_gemm 04_transformer 05_tensor_cores 06_training 07_host_side
    R=$OUT bash benchmarks/grade_profile.sh solution_08_09 "$bd" --impl solution --lessons 08_fp8 09_scan_sort
    s=$SECONDS
    # every route to a backend (issue 36 item 3): CUDA_COURSE_BACKEND=sim grades on the simulator here too
    timeout 200 python3 -m pytest tests/test_grader_backend.py -v -p no:cacheprovider -rfs > "$OUT/backend.log" 2>&1
    echo "backend routes: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/backend.log"
    if [ "${2:-}" = sass ]; then
      s=$SECONDS
      CUDA_COURSE_BUILD=$bd timeout 150 python3 benchmarks/sass_gpu_check.py --out "$OUT" > "$OUT/sass_check.log" 2>&1
      echo "sass check: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/sass_check.txt" 2>/dev/null || tail -5 "$OUT/sass_check.log"
    fi
    # the device tool returns at most 8 files: everything in one archive too
    (cd "$OUT" && tar czf final.tgz --exclude=final.tgz .)
    ;;
  *)
    echo "usage: bash benchmarks/gpu_session.sh test|grade|hostile|attacks|corpus|only TESTS|final [sass]   (on the GPU machine; see the header)"
    exit 2
    ;;
esac
