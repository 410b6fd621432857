#!/usr/bin/env bash
# Issue 36's runs on the GPU machine (python3 3.12 with torch and pytest, no make, no venv), one device call each,
# every one under 8 minutes. Set-up as in benchmarks/gpu_session.sh's header (.whl carried: landlockpy,
# pytest-timeout).
#   bash benchmarks/gpu_speed.sh speed          # the speed tests of lessons 01-07 in-process (CUDA events), as root
#   bash benchmarks/gpu_speed.sh backend        # every backend route of the grader (tests/test_grader_backend.py)
#   bash benchmarks/gpu_speed.sh exploits [K]   # the timing-exploit corpus on cuda, as an ordinary user (ccuser);
#                                               # K: only the cases pytest's -k K selects
#   bash benchmarks/gpu_speed.sh hostwork       # the host-work check on the GPU (cudacourse/hostwork.cu): the
#                                               # exploit corpus as ccuser, the build rules and lesson 07's tests
#                                               # in-process, then a cold solution grade of lessons 01-07
#   COMMIT=<hash> bash benchmarks/gpu_speed.sh dist N FIRST [LESSON ...]  # N solution grades of the speed tasks alone (of these
#                                               # lessons; default all), numbered from FIRST,
#                                               # added to results/<gpu>/speed_distribution.{md,json}
#   bash benchmarks/gpu_speed.sh dist2 N FIRST  # the same on a machine of two GPUs: N grades on each GPU at once
#                                               # (each grade alone on its GPU); GPU 1's part comes back as
#                                               # speed_distribution_gpu1.json, added here with
#                                               # speed_distribution.py -n 0 --merge
# For the 20-grade table, in parts under the 8-minute limit (a grade of the speed tasks alone: one to two minutes on
# the H200, to be measured by the first part): `dist 4 0`, then copy the part's speed_distribution.{md,json} from
# $OUT into results/<gpu>/ of the working tree (the next call carries them) and run `dist 4 4`, `dist 4 8`, ...
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/gpu-speed-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

setup() {
  python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl 2>/dev/null \
    || echo "gpu_speed: no wheels in .whl/ (see benchmarks/gpu_session.sh's header): confinement may be partial"
  ln -sfn "$PWD/cudacourse" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cudacourse"
  git add -A >/dev/null 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  git log --oneline -1 | tee -a "$OUT/gpu.txt"
}

source "$(dirname "$0")/gpu_common.sh"  # as_ccuser (as benchmarks/gpu_session.sh)

exploits_as_ccuser() {
  # the timing-exploit corpus on cuda as an ordinary user, within $1 seconds (only the cases -k "$2" selects)
  as_ccuser
  local s=$SECONDS
  as_user "CUDA_COURSE_BACKEND=cuda timeout $1 python3 -m pytest -p no:cacheprovider tests/test_speed_exploits.py \
      ${2:+-k '$2'} \
      --impl=solution -v -n 0 -rfxX --tb=short --basetemp=/tmp/ccuser-pt5" > "$OUT/exploits_cuda_ccuser.log" 2>&1
  echo "timing exploits on cuda as ccuser: rc $? in $((SECONDS - s)) s"
}

case "${1:-}" in
  speed)
    setup
    s=$SECONDS
    timeout 460 python3 -m pytest tests/test_0*_*.py --impl=solution -q -n 0 -m gpu -rfE -p no:cacheprovider \
        > "$OUT/speed_tests.log" 2>&1
    echo "speed tests: rc $? in $((SECONDS - s)) s"; tail -8 "$OUT/speed_tests.log"
    ;;
  backend)
    setup
    s=$SECONDS
    timeout 300 python3 -m pytest tests/test_grader_backend.py -v -p no:cacheprovider -rfs > "$OUT/backend.log" 2>&1
    echo "backend routes: rc $? in $((SECONDS - s)) s"; tail -12 "$OUT/backend.log"
    ;;
  exploits)
    setup
    exploits_as_ccuser 460 "${2:-}"
    tail -20 "$OUT/exploits_cuda_ccuser.log"
    ;;
  hostwork)
    setup
    exploits_as_ccuser 300
    grep -E "passed|failed|FAILED|XFAIL" "$OUT/exploits_cuda_ccuser.log" | tail -8
    s=$SECONDS
    # (lesson 07's staging launchers copy their inputs to pinned memory by design: the check must let them pass)
    timeout 180 python3 -m pytest tests/test_gpu_build_rules.py tests/test_07_host_side.py --impl=solution -q -n 0 \
        -rfE -p no:cacheprovider > "$OUT/inprocess.log" 2>&1
    echo "build rules, lesson 07 in-process: rc $? in $((SECONDS - s)) s"; tail -3 "$OUT/inprocess.log"
    bd=$(mktemp -d)
    R=$OUT bash benchmarks/grade_profile.sh solution_01_07 "$bd" --impl solution \
        --lessons 01_relu 02_reduce 03_gemm 04_transformer 05_tensor_cores 06_training 07_host_side
    grep -vE " pass$" "$OUT/solution_01_07.log" | grep -E "^ *[0-9.]+ +[0-9]+\.[0-9T]+ " | head -20
    ;;
  dist)
    setup
    gpu=$(python3 -c "import torch; from cudacourse.bench import slug; print(slug(torch.cuda.get_device_name(0)))")
    n=${2:-10}; first=${3:-0}; shift 3 2>/dev/null || shift $#
    mkdir -p "results/$gpu"
    [ "$first" -gt 0 ] && add=--append || add=
    s=$SECONDS
    # (a grade of lessons 01-07's speed tasks: about 66 s on the H200; 7 of them fit one call)
    timeout 560 python3 benchmarks/speed_distribution.py -n "$n" --first "$first" $add ${1:+--lessons "$@"} \
        ${COMMIT:+--commit "$COMMIT"} \
        --out "results/$gpu/speed_distribution.md" > "$OUT/dist_$first.log" 2>&1
    echo "speed distribution ($n grades from $first): rc $? in $((SECONDS - s)) s"; tail -30 "$OUT/dist_$first.log"
    cp "results/$gpu/speed_distribution.md" "results/$gpu/speed_distribution.json" "$OUT/" 2>/dev/null
    ;;
  dist2)
    setup
    gpu=$(python3 -c "import torch; from cudacourse.bench import slug; print(slug(torch.cuda.get_device_name(0)))")
    n=${2:-7}; first=${3:-0}
    r=results/$gpu
    s=$SECONDS
    CUDA_VISIBLE_DEVICES=0 timeout 540 python3 benchmarks/speed_distribution.py -n "$n" --first "$first" --append \
        --out "$r/speed_distribution.md" > "$OUT/dist_gpu0.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout 540 python3 benchmarks/speed_distribution.py -n "$n" --first $((first + n)) \
        --out "$r/speed_distribution_gpu1.md" > "$OUT/dist_gpu1.log" 2>&1 &
    wait
    echo "speed distribution ($n grades on each of 2 GPUs from $first) in $((SECONDS - s)) s"
    tail -4 "$OUT/dist_gpu0.log" "$OUT/dist_gpu1.log"; grep -h "^grade" "$OUT"/dist_gpu*.log
    cp "$r/speed_distribution.md" "$r/speed_distribution.json" "$r/speed_distribution_gpu1.json" "$OUT/" 2>/dev/null
    nvidia-smi --query-gpu=index,name,temperature.gpu,clocks.sm --format=csv >> "$OUT/gpu.txt"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_speed.sh speed|backend|exploits|hostwork|dist N FIRST [LESSON ...]|dist2 N FIRST   (on the GPU machine)"
    exit 2
    ;;
esac
