#!/usr/bin/env bash
# Where a grade's collection process spends its time (issue 35: the collection runs before any task process
# starts, so its seconds are on a GPU grade's critical path). Run on the GPU machine, course installed
# (benchmarks/gpu_session.sh's setup); writes under $OUT/collect:
#   bash benchmarks/collect_profile.sh
# It collects lessons 01-07's graded tests as the grader's collection does (pytest --collect-only with the course's
# plugin), twice as pytest starts by default and twice with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (what the grader's
# task processes run with: grading/processes.child_env), then the bare imports for scale, and a cProfile of each.
set -uo pipefail
if [ $# -gt 0 ]; then  # (it takes no arguments: --help and anything else print its use)
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}/collect
mkdir -p "$out"
files=$(ls tests/test_0[1-7]_*.py)
collect() {  # $1: label; the rest: environment assignments
  local label=$1; shift
  env "$@" /usr/bin/time -f "$label: %e s wall, %U user + %S sys CPU-s" python3 -m pytest -p cudacourse.pytest_plugin \
    -p no:cacheprovider -p no:xdist -q $files --collect-only --impl=solution > /dev/null 2>> "$out/times.txt"
}
: > "$out/times.txt"
for i in 1 2; do collect "collect, plugins autoloaded ($i)" X=1; done
for i in 1 2; do collect "collect, PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 ($i)" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; done
/usr/bin/time -f "import torch: %e s wall, %U user + %S sys CPU-s" python3 -c "import torch" 2>> "$out/times.txt"
# the bytecode a grade keeps where the packages ship none (grading.processes.bytecode_cache): written once, then read
pyc=$(mktemp -d)
python3 -c "import importlib.util as u, pathlib as p; s = u.find_spec('torch'); \
print('torch ships bytecode:', p.Path(u.cache_from_source(s.origin)).exists())" >> "$out/times.txt"
/usr/bin/time -f "import torch, writing bytecode to a fresh PYTHONPYCACHEPREFIX: %e s wall, %U user + %S sys CPU-s" \
  env -u PYTHONDONTWRITEBYTECODE python3 -X pycache_prefix="$pyc" -c "import torch" 2>> "$out/times.txt"
echo "bytecode files written: $(find "$pyc" -name '*.pyc' | wc -l)" >> "$out/times.txt"
for i in 1 2; do
  /usr/bin/time -f "import torch, reading that bytecode (-B) ($i): %e s wall, %U user + %S sys CPU-s" \
    python3 -B -X pycache_prefix="$pyc" -c "import torch" 2>> "$out/times.txt"
done
/usr/bin/time -f "import pytest: %e s wall, %U user + %S sys CPU-s" python3 -c "import pytest" 2>> "$out/times.txt"
python3 -c "from importlib.metadata import entry_points as e; print('\n'.join(sorted(f'{p.name} ({p.dist.name})' for p in e(group='pytest11'))))" \
  > "$out/autoloaded_plugins.txt"
for mode in autoload disabled; do
  if [ $mode = disabled ]; then export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; fi
  python3 -m cProfile -o "$out/$mode.prof" -m pytest -p cudacourse.pytest_plugin -p no:cacheprovider -p no:xdist -q \
    $files --collect-only --impl=solution > /dev/null 2>&1
  python3 -c "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(40)" "$out/$mode.prof" \
    > "$out/profile_$mode.txt"
  rm -f "$out/$mode.prof"
done
cat "$out/times.txt"
