#!/usr/bin/env bash
# What benchmarks/gpu_session.sh and benchmarks/gpu_speed.sh share on the GPU machine (sourced, never run).

as_ccuser() {
  # an ordinary user: commands run as root there, where RLIMIT_NPROC never applies and no pids cgroup is delegated,
  # so as root the attack tests skip ("unconfined")
  id ccuser >/dev/null 2>&1 || useradd -m ccuser
  chmod a+rx /work 2>/dev/null; chmod -R a+rX "$PWD"; chmod 1777 /tmp
  pybin=$(dirname "$(command -v python3)")
  chmod -R a+rX "$(dirname "$pybin")" 2>/dev/null
  # the folders pytest, xdist and filelock come from (root's own site folder on that machine): readable, and on
  # every Python's path by a .pth (workers start with python -I, which ignores PYTHONPATH)
  for m in pytest xdist filelock; do python3 -c "import $m, os; print(os.path.dirname(os.path.dirname($m.__file__)))"
  done | sort -u > /tmp/sites
  while read -r d; do p=$d; while [ "$p" != / ]; do chmod a+rx "$p" 2>/dev/null; p=$(dirname "$p"); done
    chmod -R a+rX "$d"; done < /tmp/sites
  cp /tmp/sites "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-root-site.pth"
  su ccuser -c "git config --global --add safe.directory '*'"
  keep=$(env | grep -E '^(CXX|CC|CUDAHOSTCXX|CUDA_HOME|TORCH_CUDA_ARCH_LIST|LD_LIBRARY_PATH)=' | sed 's/^/export /' | tr '\n' ';')
  as_user() { su ccuser -s /bin/bash -c "cd '$PWD' && $keep export PYTHONUNBUFFERED=1 PATH=$pybin:$PATH CUDA_COURSE_BUILD=/tmp/ccb-user && $1"; }
}
