#!/usr/bin/env bash
# Create the course's virtual environment in .venv (idempotent; `make` calls this for you).
#
# Reuses a torch that the calling python already has (conda env, system install): the venv then sees
# the system site-packages. Otherwise installs torch ${TORCH_VERSION:-2.13.0}: on a machine without an
# NVIDIA GPU the small CPU build from TORCH_INDEX_URL (default https://download.pytorch.org/whl/cpu; set
# TORCH_INDEX_URL= empty for pip's own index, which on Linux serves the multi-GB CUDA build).
#
# Usage: ./setup.sh [EXTRAS]   EXTRAS: pyproject extras to add, comma-separated. The learner's verbs (grade,
# check, doctor) need none; `make lab` asks for "notebooks", `make test` for "dev". Extras installed
# once stay installed.
set -euo pipefail
cd "$(dirname "$0")"
# pip_lines: the lines of pip's output (stdin) a learner sees: each package collected, each large download with
# its size (a download of 100 MB or more, such as torch's ~190 MB CPU wheel, says that pip stays quiet until it
# is done: pip's progress bar does not pass through the log), what was installed, and errors.
# (Each line as pip prints it: Python and sed buffer a pipe, and a learner saw 47 s of nothing, then every line.)
SED_UNBUFFERED=$(sed -u q </dev/null >/dev/null 2>&1 && echo -u || true)
pip_lines() {
  grep -E --line-buffered '^(Collecting|Processing|Installing collected packages|Successfully installed|ERROR|error)|^ *Downloading .*\([0-9.]+ (MB|GB)\)$' \
    | sed $SED_UNBUFFERED -E -e 's#^ *Downloading .*/([^/ ]+) \(#  Downloading \1 (#' \
             -e 's#(\(([0-9]{3,}(\.[0-9]+)? MB|[0-9.]+ GB)\))$#\1: a large download; pip prints nothing more until it is done#' \
             -e 's#^Processing [^ ]*/([^/ ]+)#Processing \1#' -e 's/%2B/+/g' -e 's/^/setup:   /' || true
}
if [ "${1:-}" = "--pip-lines" ]; then pip_lines; exit 0; fi  # (for the course's tests: filter stdin, install nothing)

# reach URL: whether pip could reach a package index; prints why not. Without the index pip says only
# "ResolutionImpossible" (it found torch in a local wheel folder but none of its dependencies), which reads
# like a broken install (a learner's walkthrough, 2026-11-25).
reach() {
  "${PYTHON:-python3}" - "$1" <<'PYEOF'
import sys, urllib.request
url = sys.argv[1]
if url.startswith("file:"):
    path = urllib.request.url2pathname(url[5:].removeprefix("//"))
    sys.exit(0 if __import__("os").path.exists(path) else print(f"{path} does not exist") or 1)
try:
    urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15).close()
except urllib.error.HTTPError:
    pass  # the server answered: it is reachable (an index may refuse HEAD on its root)
except Exception as e:  # noqa: BLE001 - any failure to connect is the answer
    print(getattr(e, "reason", e))
    sys.exit(1)
PYEOF
}
if [ "${1:-}" = "--reach" ]; then reach "$2"; exit $?; fi  # (for the course's tests)

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.cudacourse-setup  # "<hash of pyproject.toml and setup.sh> <extras installed>"
LOG=$VENV/setup.log            # pip's whole output (the terminal gets one line per package)
want="$(cat pyproject.toml setup.sh | sha256sum | cut -c1-16)"
have_hash= have_extras=
if [ -f "$STAMP" ]; then read -r have_hash have_extras < "$STAMP" || true; fi
[ "$have_hash" = "$want" ] || have_extras=
# the extras wanted now: those asked for plus those already installed, sorted, no duplicates
extras=$(echo "${1:-},$have_extras" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
if [ "$have_hash" = "$want" ] && [ "$extras" = "$have_extras" ]; then exit 0; fi

# heartbeat NAME: every HEARTBEAT_S seconds (default 10), a line saying NAME is still going: pip is silent while
# it unpacks and installs a large wheel (35 s for torch on a 2-core machine), and no wait may look like a hang.
heartbeat() {
  local t0 every=${HEARTBEAT_S:-10}
  t0=$(date +%s)
  while sleep "$every"; do echo "setup:   ... still $1 ($(( $(date +%s) - t0 )) s so far)"; done
}

# step NAME CMD...: say what is installed, run it showing each package pip fetches, then say how long it took.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "setup: $name ..."
  local log=/dev/null
  [ -d "$VENV" ] && log=$LOG
  heartbeat "${name%% (*}" &
  local beat=$!
  "$@" 2>&1 | tee -a "$log" | pip_lines || rc=$?
  kill "$beat" 2>/dev/null; wait "$beat" 2>/dev/null || true
  if [ "$rc" = 0 ]; then echo "setup: $name: done in $((SECONDS - t0)) s"; return 0; fi
  echo "setup: $name: FAILED (exit $rc); all of pip's output is in $LOG"
  local net
  net=$(grep -E 'Name or service not known|Failed to establish|Could not fetch|connection' "$LOG" 2>/dev/null | tail -n 3 || true)
  [ -z "$net" ] || { echo "setup: pip's last network complaints:"; echo "$net" | sed 's/^/setup:   /'; }
  return "$rc"
}
# (for the course's tests: run one step with its heartbeat, logging nowhere)
if [ "${1:-}" = "--step" ]; then shift; VENV=$(mktemp -u); step "$@"; exit $?; fi
pip_install() { PYTHONUNBUFFERED=1 "$VENV/bin/python" -m pip install --progress-bar off "$@"; }

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
      pip_install --retries 0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION:-2.13.0}" || {
      why=
      if [ -n "${TORCH_INDEX_URL:-}" ] && ! why=$(reach "$TORCH_INDEX_URL"); then
        echo "setup: this machine cannot reach $TORCH_INDEX_URL ($why): that is why torch did not install."
      else
        echo "setup: torch did not install${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL} (pip's reason is above; all of its output is in $LOG)."
      fi
      echo "setup: Set TORCH_INDEX_URL to an index you can reach (empty: pip's default index, which on Linux is the"
      echo "setup: multi-GB CUDA build), or install a torch ${TORCH_VERSION:-2.13.0} wheel you have into .venv"
      echo "setup: (.venv/bin/python -m pip install ./torch-${TORCH_VERSION:-2.13.0}+cpu-...whl), then run the command again."
      exit 1; }
  fi
fi
step "installing the course package (editable) with its dependencies${extras:+ and the [$extras] tools} (pyproject.toml)" \
  pip_install -e ".${extras:+[$extras]}"
if "$VENV/bin/python" -c "import ipykernel" 2>/dev/null; then
  step "registering the notebook kernel" "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 || true
fi
"$VENV/bin/python" -c "import cudacourse, torch" || { echo "setup: the install did not work (see above)"; exit 1; }
echo "$want $extras" > "$STAMP"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
