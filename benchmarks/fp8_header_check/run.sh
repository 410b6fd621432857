#!/usr/bin/env bash
# The simulator's cuda_fp8.h (cudacourse/sim/runtime/ccsim_fp8.h) against the CUDA toolkit's own header, whose host
# code (cuda_fp8.hpp, compiled here by g++) is the reference: every conversion of ours.cpp is compared with the same
# call of theirs.cpp (main.cpp says which inputs). Needs g++ and a CUDA toolkit's include folder (nvcc is not used).
#   bash benchmarks/fp8_header_check/run.sh > results/cpu/fp8_header_check.txt
#   bash benchmarks/fp8_header_check/run.sh 997   # every 997th float instead (a few seconds; tests/sim/test_api_fp8.py)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
inc=${CUDA_INCLUDE:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")/include}
[ -f "$inc/cuda_fp8.hpp" ] || inc=$(ls -d /usr/local/cuda*/include | head -1)
tmp=$(mktemp -d)
g++ -O2 -std=c++17 -I"$root/cudacourse/sim/runtime" -c "$here/ours.cpp" -o "$tmp/ours.o" || exit 2
g++ -O2 -std=c++17 -I"$inc" -c "$here/theirs.cpp" -o "$tmp/theirs.o" || exit 2
g++ -O2 "$here/main.cpp" "$tmp/ours.o" "$tmp/theirs.o" -o "$tmp/cmp" || exit 2
echo "# machine: $(uname -m), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $(g++ --version | head -1)"
echo "# reference: $inc/cuda_fp8.hpp ($(grep -m1 -o 'CUDA_VERSION [0-9]*' "$inc/cuda.h" 2>/dev/null || echo 'version unknown'))"
echo "# commit: $(git -C "$root" log --oneline -1); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# command: bash benchmarks/fp8_header_check/run.sh $*"
"$tmp/cmp" "$@"
rc=$?
rm -rf "$tmp"
exit $rc
