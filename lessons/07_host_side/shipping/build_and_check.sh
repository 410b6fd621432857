#!/usr/bin/env bash
# Build lesson 07's swish operator both ways and check each build:
#   1. CMake (TORCH_LIBRARY): libswish_op.so, loaded with torch.ops.load_library, checked in this Python;
#   2. setup.py: a wheel, installed into a FRESH virtual environment (with torch==<this torch's version>
#      from the package index) and checked there by check_wheel.py.
# Usage: lessons/07_host_side/shipping/build_and_check.sh [WORKDIR]   (PYTHON=... picks the interpreter;
# default: python3). With a CUDA torch and nvcc it builds and checks the CUDA implementation too.
# On a machine that cannot download torch, REUSE_TORCH=1 makes the fresh venv see PYTHON's torch (a .pth
# file naming the folder that holds it, so that folder's other packages are visible too) and installs only
# the wheel into it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
WORK="${1:-$(mktemp -d)}"
mkdir -p "$WORK"
echo "== workdir $WORK; python $($PY -c 'import sys, torch; print(sys.executable, "torch", torch.__version__)')"

echo "== 1. CMake build (TORCH_LIBRARY)"
PREFIX="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
cmake -S "$HERE" -B "$WORK/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$WORK/cmake-build"
$PY - "$WORK/cmake-build/libswish_op.so" <<'PYEOF'
import sys
import torch
torch.ops.load_library(sys.argv[1])
ops = torch.ops.cudacourse_l07_cpp
for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    x = torch.randn(4097, device=dev) * 4
    torch.testing.assert_close(ops.swish(x), x * torch.sigmoid(x), rtol=1e-5, atol=1e-6)
    f = torch.compile(lambda t: ops.swish(t) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(x), x * torch.sigmoid(x) + 1, rtol=1e-5, atol=1e-6)
    print(f"PASS cmake build: values and torch.compile fullgraph ({dev})")
PYEOF

echo "== 2. setup.py wheel"
rm -rf "$WORK/src" "$WORK/dist"
cp -r "$HERE" "$WORK/src"
(cd "$WORK/src" && $PY -m pip wheel -q --no-build-isolation --no-deps -w "$WORK/dist" .)
WHEEL="$(ls "$WORK"/dist/cudacourse_swish_ext-*.whl)"
echo "built $WHEEL"
TORCH_REQ="torch==$($PY -c 'import torch; print(torch.__version__.split("+")[0])')"
rm -rf "$WORK/fresh-venv"
if [ "${REUSE_TORCH:-0}" = 1 ]; then
  "$PY" -m venv "$WORK/fresh-venv"
  SITE="$("$WORK/fresh-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' > "$SITE/reuse_torch.pth"
  "$WORK/fresh-venv/bin/pip" install -q --no-deps "$WHEEL"
else
  "$PY" -m venv "$WORK/fresh-venv"
  "$WORK/fresh-venv/bin/pip" install -q "$TORCH_REQ" "$WHEEL"
fi
(cd "$WORK" && "$WORK/fresh-venv/bin/python" "$HERE/check_wheel.py")
