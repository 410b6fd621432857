"""Nothing a learner types loses their work (issue 34).

Every verb's ``--help`` prints help and changes nothing; the generators (``stubs``, ``templates``) never
replace a file someone edited unless ``--force``, which keeps a backup; ``make clean`` removes only build
products; an installed package without a checkout says how to find one. Each test runs the commands as a
learner types them, in a copy of the course (a git repository of its own), never in this checkout.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudacourse.course import course

ROOT = course().root
# Not part of the course a learner clones: environments, caches, other checkouts' build products.
_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cudacourse-build", ".pytest_cache", ".ruff_cache",
                                 "__pycache__", "*.egg-info", ".whl", ".gl", ".cudacourse-generated.json",
                                 ".cudacourse-backups", "results", "benchmarks")
VERBS = ("check", "grade", "doctor", "bench", "profile", "sass", "stubs", "templates")
EDITED = "lessons/01_relu/relu.cu"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of the course as a learner's clone (committed), with task 1.1 edited and not committed."""
    repo = tmp_path / "course"
    shutil.copytree(ROOT, repo, ignore=_IGNORE)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "clone")
    f = repo / EDITED
    f.write_text(f.read_text().replace("// TODO(task 1.1)", "// my work on task 1.1\n    // TODO(task 1.1)", 1))
    return repo


def _env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_COURSE_")}
    env.update(PYTHONPATH=str(repo), CUDA_COURSE_ROOT=str(repo), CUDA_COURSE_BUILD=str(repo / ".cudacourse-build"))
    return env


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudacourse", *args], cwd=repo, env=_env(repo), text=True,
                          capture_output=True, timeout=600, check=False)


def _snapshot(repo: Path) -> dict[str, str]:
    """Every file outside .git and build products, with its hash."""
    out = {}
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo).as_posix()
        if p.is_file() and not rel.startswith((".git/", ".cudacourse-build/")) and "__pycache__" not in rel:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_every_verb_help_prints_help_and_changes_nothing(clone: Path) -> None:
    before = _snapshot(clone)
    for args in [("--help",), ("--version",), *((v, "--help") for v in VERBS), *((v, "-h") for v in VERBS)]:
        r = _run(clone, *args)
        assert r.returncode == 0, f"cudacourse {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        assert ("usage:" in r.stdout) or args == ("--version",), f"cudacourse {' '.join(args)} printed no usage"
        assert _snapshot(clone) == before, f"cudacourse {' '.join(args)} changed files"
    assert f"course at {clone}" in _run(clone, "--version").stdout


def test_generators_never_replace_an_edited_file(clone: Path) -> None:
    before = _snapshot(clone)
    r = _run(clone, "stubs")
    assert r.returncode == 1, r.stdout + r.stderr
    assert EDITED in r.stderr and "--force" in r.stderr and "Nothing was changed" in r.stderr
    assert _snapshot(clone) == before
    for check in (("stubs", "--check"), ("templates", "--check")):
        _run(clone, *check)
        assert _snapshot(clone) == before, f"{check} changed files"
    # an edited template is protected the same way
    tpl = clone / "templates" / "classroom.yml"
    tpl.write_text(tpl.read_text() + "# my own step\n")
    before = _snapshot(clone)
    r = _run(clone, "templates")
    assert r.returncode == 1 and "classroom.yml" in r.stderr, r.stdout + r.stderr
    assert _snapshot(clone) == before, "an edited template was rewritten"
    # --force keeps a backup of the learner's version, then writes the stub
    edited = (clone / EDITED).read_text()
    r = _run(clone, "stubs", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    backups = list((clone / ".cudacourse-backups").rglob("relu.cu"))
    assert len(backups) == 1 and backups[0].read_text() == edited
    assert "my work on task 1.1" not in (clone / EDITED).read_text()


def test_a_maintainer_can_still_regenerate_unedited_stubs(clone: Path) -> None:
    """A stub that still holds what the committed solution derives is replaced when the solution changes."""
    _git(clone, "checkout", "--", EDITED)  # no learner edit this time
    sol = clone / "solutions" / "01_relu" / "relu.cu"
    sol.write_text(sol.read_text() + "\n// a new line from the maintainer\n")
    r = _run(clone, "stubs")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "a new line from the maintainer" in (clone / EDITED).read_text()
    # and again: what it last wrote is its own, even though git HEAD still has the old stub
    sol.write_text(sol.read_text() + "// and another\n")
    r = _run(clone, "stubs")
    assert r.returncode == 0 and "and another" in (clone / EDITED).read_text(), r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_removes_only_build_products(clone: Path) -> None:
    for product in (".cudacourse-build/x/relu.so", ".pytest_cache/v/cache/lastfailed"):
        (clone / product).parent.mkdir(parents=True, exist_ok=True)
        (clone / product).write_text("built")
    (clone / "my_notes.md").write_text("mine")
    (clone / ".venv").mkdir()
    (clone / ".venv" / "marker").write_text("env")
    before = {k for k in _snapshot(clone) if not k.startswith(".pytest_cache/")}
    r = subprocess.run(["make", "clean"], cwd=clone, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (clone / ".cudacourse-build").exists() and not (clone / ".pytest_cache").exists()
    assert set(_snapshot(clone)) == before


def test_an_installed_package_finds_the_course_named_by_cuda_course_root(tmp_path: Path) -> None:
    """A non-editable install: only the package, in a folder of its own, as site-packages would hold it."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "cudacourse", site / "cudacourse", ignore=_IGNORE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_COURSE_")}
    env.update(PYTHONPATH=str(site), CUDA_COURSE_BUILD=str(tmp_path / "build"))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cudacourse", *args], cwd=tmp_path, env={**env, **extra},
                              text=True, capture_output=True, timeout=600, check=False)

    r = run("doctor")
    assert r.returncode == 1 and "CUDA_COURSE_ROOT" in r.stdout and "cannot run here" in r.stdout, r.stdout
    assert "CUDA_COURSE_ROOT" in run("--version").stdout
    r = run("check", "1.1")
    assert r.returncode != 0 and "CUDA_COURSE_ROOT" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    r = run("--version", CUDA_COURSE_ROOT=str(ROOT))
    assert f"course at {ROOT}" in r.stdout, r.stdout + r.stderr
    r = run("doctor", CUDA_COURSE_ROOT=str(tmp_path))
    assert r.returncode == 1 and "holds no lessons" in r.stdout, r.stdout
