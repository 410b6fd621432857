#!/usr/bin/env bash
# Create the course's virtual environment in .venv (idempotent; `make` calls this for you).
#
# Reuses a torch that the calling python already has (conda env, system install): the venv then sees
# the system site-packages. Otherwise installs torch ${TORCH_VERSION:-2.13.0}. On a machine without an
# NVIDIA GPU, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the small CPU build.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.cudacourse-setup
want="$(cat pyproject.toml setup.sh | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then exit 0; fi

if "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: reusing the torch of $("$PY" -c 'import sys; print(sys.executable)') ($("$PY" -c 'import torch; print(torch.__version__)'))"
  [ -d "$VENV" ] || "$PY" -m venv --system-site-packages "$VENV"
else
  [ -d "$VENV" ] || "$PY" -m venv "$VENV"
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "setup: installing torch==${TORCH_VERSION:-2.13.0} into $VENV"
    "$VENV/bin/python" -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION:-2.13.0}"
  fi
fi
echo "setup: installing the course package and its tools into $VENV"
"$VENV/bin/python" -m pip install -q -e ".[dev,notebooks]"
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null 2>&1 || true
echo "$want" > "$STAMP"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
