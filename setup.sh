#!/usr/bin/env bash
# Create the course's virtual environment in .venv (idempotent; `make` calls this for you).
#
# Reuses a torch that the calling python already has (conda env, system install): the venv then sees
# the system site-packages. Otherwise installs torch ${TORCH_VERSION:-2.13.0}: on a machine without an
# NVIDIA GPU the small CPU build from TORCH_INDEX_URL (default https://download.pytorch.org/whl/cpu; set
# TORCH_INDEX_URL= empty for pip's own index, which on Linux serves the multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.cudacourse-setup
want="$(cat pyproject.toml setup.sh | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then exit 0; fi

# step NAME CMD...: say what is installed, run it showing each package pip fetches, then say how long it took.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "setup: $name ..."
  "$@" 2>&1 | { grep -E --line-buffered '^(Collecting|Successfully installed|ERROR|error)|Name or service not known|Failed to establish' \
                 | sed 's/^/setup:   /' || true; } || rc=$?
  if [ "$rc" = 0 ]; then echo "setup: $name: done in $((SECONDS - t0)) s"; else echo "setup: $name: FAILED (exit $rc)"; fi
  return "$rc"
}
pip_install() { "$VENV/bin/python" -m pip install --progress-bar off "$@"; }

# No NVIDIA driver here: the CPU build of torch, never the CUDA one by accident (unless TORCH_INDEX_URL is set).
if [ -z "${TORCH_INDEX_URL+set}" ] && [ ! -e /dev/nvidiactl ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
  cpu_default=1
fi

if "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: reusing the torch of $("$PY" -c 'import sys; print(sys.executable)') ($("$PY" -c 'import torch; print(torch.__version__)'))"
  [ -d "$VENV" ] || step "creating $VENV (sees the system site-packages)" "$PY" -m venv --system-site-packages "$VENV"
else
  [ -d "$VENV" ] || step "creating $VENV" "$PY" -m venv "$VENV"
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    step "installing torch==${TORCH_VERSION:-2.13.0}${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}${cpu_default:+ (no NVIDIA GPU here: the CPU build)} (the largest download)" \
      pip_install --retries 1 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION:-2.13.0}" || {
      echo "setup: torch did not install${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}. If the lines above say 'Name or service"
      echo "setup: not known' or 'connection', this machine cannot reach that index: install torch into .venv yourself"
      echo "setup: (.venv/bin/python -m pip install torch==${TORCH_VERSION:-2.13.0}), or set TORCH_INDEX_URL to an index you can reach (empty: pip's"
      echo "setup: default index, which on Linux is the multi-GB CUDA build), then run the command again."
      exit 1; }
  fi
fi
step "installing the course package (editable) with its dependencies and the [dev,notebooks] tools (pyproject.toml)" \
  pip_install -e ".[dev,notebooks]"
step "registering the notebook kernel" "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 || true
"$VENV/bin/python" -c "import cudacourse, torch" || { echo "setup: the install did not work (see above)"; exit 1; }
echo "$want" > "$STAMP"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
