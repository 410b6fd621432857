"""The documentation's figures and links are backed by committed files.

Conventions checked here (docs/CONTRIBUTING.md states them for authors):

- A **measured table** in a lesson explainer (``lessons/*/README.md``) or the top ``README.md`` names
  its source in the first non-blank line under it: ``Source: results/...`` (a markdown link or a bare
  path; several files may follow, separated by commas). Every number in the table, outside code spans
  and outside the ``task``/``idea``/``target`` columns, must appear in one of the named committed files,
  up to the table's rounding: ``1.00x`` matches ``1.0``, ``4.7x`` matches ``4.72``, ``3017`` matches
  ``3017.4``.
- A table whose cells hold measurements (``ms``, ``GB/s``, ``TFLOP/s``, ``% of``, ``x cuBLAS``...) must
  have such a line: a measured figure without a committed source fails.
- Every relative link in every committed markdown file (and in the notebooks' markdown cells) resolves to
  a committed file.
- ``environment.yml`` parses, names what the course needs, and agrees with ``setup.sh`` and
  ``pyproject.toml`` (see ``test_environment_yml``).
- A command shown to learners (READMEs, ``docs/``, the files of ``lessons/`` and ``solutions/``, notebooks) is
  its ``make`` form: ``cudacourse <verb>`` and ``python -m cudacourse`` only where the same line or paragraph
  mentions ``.venv``, and never ``jupyter lab`` (``make lab``).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def committed_files() -> set[str]:
    """Paths (relative to the repository root) that git tracks, plus files staged for commit."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        # a copy without its .git (a zip, the GPU machine's copy of the tree): which files are committed is unknown
        pytest.skip("these checks compare the docs with the committed files: they need the course's git checkout",
                    allow_module_level=True)
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {p for p in out.split("\0") if p}


COMMITTED = committed_files()
EXPLAINERS = sorted(p for p in COMMITTED if re.fullmatch(r"lessons/[^/]+/README\.md", p)) + ["README.md"]

# ----------------------------------------------------------------------------------------------------
# Markdown tables and their Source lines
# ----------------------------------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.]*\()")
CODE_SPAN = re.compile(r"`[^`]*`")
SKIP_COLUMNS = {"task", "idea", "target", "what", "you write", "you learn", "configuration"}
MEASURED_CELL = re.compile(r"\d\s*(ms|GB/s|TFLOP/s|us|µs)\b|% of|x cuBLAS|vs PyTorch|vs `torch|fast mode|checked mode",
                           re.I)
SOURCE_PATH = re.compile(r"(?:\]\(|\s|^)((?:\.\./)*(?:results|benchmarks)/[\w./-]+?)(?=[)\s,;]|\.?$)")


@dataclass
class Table:
    """A markdown table, where it is, and the files its Source line names (empty when it has none)."""

    doc: str
    line: int
    header: list[str]
    rows: list[list[str]]
    sources: list[str]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(doc: str, text: str | None = None) -> list[Table]:
    """Every table of a markdown file (fenced code blocks skipped) with its Source line's files."""
    lines = ((ROOT / doc).read_text() if text is None else text).splitlines()
    found, i, fence = [], 0, False
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fence = not fence
        if (not fence and lines[i].lstrip().startswith("|") and i + 1 < len(lines)
                and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", lines[i + 1]) and "-" in lines[i + 1]):
            start, header = i, _cells(lines[i])
            i += 2
            rows = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            sources = []
            if j < len(lines) and lines[j].startswith("Source:"):
                for m in SOURCE_PATH.finditer(lines[j]):
                    p = m.group(1).rstrip(".")
                    p = str((ROOT / doc).parent.joinpath(p).resolve().relative_to(ROOT)) if p.startswith("..") else p
                    sources.append(p)
            found.append(Table(doc, start + 1, header, rows, sources))
            continue
        i += 1
    return found


def numbers_in_cell(cell: str) -> list[str]:
    """Numeric tokens of a table cell, code spans removed (``relu_v3_float4`` is not a figure)."""
    return NUMBER.findall(CODE_SPAN.sub(" ", cell))


def file_numbers(path: str) -> list[Decimal]:
    """Every number written in a committed results file."""
    return [Decimal(t) for t in NUMBER.findall((ROOT / path).read_text())]


def appears(token: str, pool: list[Decimal]) -> bool:
    """True when ``token`` equals a number of ``pool`` rounded to the token's own number of decimals."""
    x = Decimal(token.lstrip("+"))
    decimals = -x.as_tuple().exponent if x.as_tuple().exponent < 0 else 0
    half = Decimal(5) / Decimal(10) ** (decimals + 1)
    return any(abs(abs(y) - abs(x)) <= half for y in pool)


ALL_TABLES = [t for doc in EXPLAINERS for t in tables(doc)]


def _is_measured(t: Table) -> bool:
    if any(h.strip("* ").lower() == "points" for h in t.header):  # a task table: targets, not measurements
        return False
    unit_header = re.compile(r"(ms|us|µs|GB/s|TFLOP/s|s)\b|.*\b(ms|GB/s|TFLOP/s)$", re.I)
    return (any(unit_header.match(h.strip("* ")) for h in t.header)
            or any(MEASURED_CELL.search(CODE_SPAN.sub(" ", c)) for row in [t.header, *t.rows] for c in row))


@pytest.mark.parametrize("table", [t for t in ALL_TABLES if _is_measured(t)], ids=lambda t: f"{t.doc}:{t.line}")
def test_measured_table_names_its_source(table: Table) -> None:
    """A table of measurements says, right under it, which committed file holds them."""
    assert table.sources, (f"{table.doc}:{table.line}: this table holds measured figures but no 'Source: "
                           "results/...' line follows it. Add one naming the committed output the figures "
                           "come from (benchmarks/ and results/ hold them).")
    for s in table.sources:
        assert s in COMMITTED, f"{table.doc}:{table.line}: the Source line names {s}, which is not a committed file"


def missing_figures(table: Table, pool: list[Decimal]) -> list[str]:
    """The numbers of ``table`` (label columns and code spans aside) that ``pool`` does not hold."""
    skip = {i for i, h in enumerate(table.header) if h.strip("* ").lower().split(" (")[0] in SKIP_COLUMNS}
    missing = []
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row):
            if c not in skip:
                missing += [f"row {r + 1} '{cell}': {tok}" for tok in numbers_in_cell(cell) if not appears(tok, pool)]
    return missing


@pytest.mark.parametrize("table", [t for t in ALL_TABLES if t.sources], ids=lambda t: f"{t.doc}:{t.line}")
def test_measured_numbers_appear_in_source(table: Table) -> None:
    """Every figure of a sourced table is one of the numbers in its source files (up to rounding)."""
    pool = [n for s in table.sources if s in COMMITTED for n in file_numbers(s)]
    missing = missing_figures(table, pool)
    assert not missing, (f"{table.doc}:{table.line}: figures not found in {', '.join(table.sources)}:\n  "
                         + "\n  ".join(missing) + "\nRe-measure and commit the output, or correct the table.")


def test_table_check_catches_a_wrong_figure() -> None:
    """A table with a figure its source does not hold is reported; the Source line is parsed."""
    text = ("| version | task | ms | vs ref |\n|---|---|---:|---:|\n| `relu_v3` | 1.3 | 0.712 | 1.00x |\n"
            "| `relu_v1` | 1.1 | 0.905 | 0.79x |\n\n"
            "Source: [results](../../results/nvidia-h100-80gb-hbm3/results.md)\n")
    (t,) = tables("lessons/01_relu/README.md", text)
    assert t.sources == ["results/nvidia-h100-80gb-hbm3/results.md"] and _is_measured(t)
    pool = [Decimal(x) for x in ("0.712", "1.00", "0.900", "0.79")]
    assert missing_figures(t, pool) == ["row 2 '0.905': 0.905"]  # task ids 1.3/1.1 are labels, not figures


def test_convention_finds_the_measured_tables() -> None:
    """The parser sees the tables the explainers are known to have (guards against a silent no-op)."""
    sourced = [t for t in ALL_TABLES if t.sources]
    assert len(sourced) >= 8, f"only {len(sourced)} tables with a Source line found"
    assert {t.doc for t in sourced} >= {f"lessons/{d}/README.md" for d in
                                        ("01_relu", "02_reduce", "03_gemm", "04_transformer")}


def test_number_matching_is_strict_enough() -> None:
    """Rounding is tolerated, other numbers are not."""
    pool = [Decimal("4.72"), Decimal("3017"), Decimal("0.712"), Decimal("1.0")]
    assert appears("4.7", pool) and appears("1.00", pool) and appears("0.712", pool) and appears("3017", pool)
    assert not appears("4.8", pool) and not appears("0.713", pool) and not appears("3019", pool)
    assert numbers_in_cell("`relu_v3_float4` 0.712 ms, 1.25x") == ["0.712", "1.25"]


# ----------------------------------------------------------------------------------------------------
# Links
# ----------------------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_texts() -> list[tuple[str, str]]:
    docs = []
    for p in sorted(COMMITTED):
        if p.endswith(".md") and (ROOT / p).exists():
            docs.append((p, (ROOT / p).read_text()))
        elif p.endswith(".ipynb") and (ROOT / p).exists():
            nb = json.loads((ROOT / p).read_text())
            text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
            docs.append((p, text))
    return docs


def broken_links(doc: str, text: str, committed: set[str]) -> list[str]:
    """Relative links of markdown ``text`` (written in file ``doc``) whose target is not committed."""
    broken = []
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code shows link syntax, it does not link
    for m in LINK.finditer(text):
        target = (m.group(1) or m.group(2)).split("#")[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # anchors, http:, mailto:
            continue
        resolved = (ROOT / doc).parent.joinpath(target).resolve()
        try:
            rel = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            broken.append(f"{doc}: {target} (outside the repository)")
            continue
        if rel not in committed and not any(c.startswith(rel + "/") for c in committed):
            broken.append(f"{doc}: {target}")
    return broken


def test_relative_links_resolve_to_committed_files() -> None:
    """Every relative link of every committed markdown file and notebook points at a committed file."""
    broken = [b for doc, text in _markdown_texts() for b in broken_links(doc, text, COMMITTED)]
    assert not broken, "relative links to files that are not committed:\n  " + "\n  ".join(broken)


def test_link_check_catches_a_broken_link() -> None:
    """The link check is not a no-op: missing files, escapes and uncommitted files are reported."""
    text = ("[ok](../../README.md) ![plot](../../results/missing.png) [web](https://example.org) [a](#x) "
            "[out](../../../etc/passwd) [dir](../../results/) `[code](nowhere.md)`\n```\n[in a fence](nowhere.md)\n```")
    got = broken_links("lessons/01_relu/README.md", text, {"README.md", "results/x/results.md"})
    assert got == ["lessons/01_relu/README.md: ../../results/missing.png",
                   "lessons/01_relu/README.md: ../../../etc/passwd (outside the repository)"]


# ----------------------------------------------------------------------------------------------------
# environment.yml
# ----------------------------------------------------------------------------------------------------


def _setup_torch_version() -> str:
    m = re.search(r"TORCH_VERSION:-([0-9.]+)", (ROOT / "setup.sh").read_text())
    assert m, "setup.sh no longer names a default TORCH_VERSION; update test_environment_yml"
    return m.group(1)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _in_range(version: str, spec: str) -> bool:
    """``version`` satisfies a conda spec such as ``>=2.11,<2.14`` (only >=, <, <=, == used here)."""
    ok = True
    for part in spec.split(","):
        m = re.fullmatch(r"(>=|<=|<|==|=)?\s*([0-9.*]+)", part.strip())
        assert m, f"unexpected version spec {part!r}"
        op, v = m.group(1) or "==", m.group(2).rstrip(".*")
        a, b = _version_tuple(version), _version_tuple(v)
        a = a[: len(b)] if op in ("==", "=") else a
        ok &= {">=": a >= b, "<=": a <= b, "<": a < b, "==": a == b, "=": a == b}[op]
    return ok


def test_environment_yml() -> None:
    """environment.yml parses, pins one CUDA for pytorch and nvcc, and agrees with setup.sh and pyproject."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse environment.yml")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "cudacourse" and env["channels"] == ["conda-forge"]
    deps = env["dependencies"]
    conda = {}
    for d in deps:
        if isinstance(d, str):
            m = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", d)
            conda[m.group(1)] = m.group(2).strip()
    pip = next((d["pip"] for d in deps if isinstance(d, dict) and "pip" in d), [])

    for need in ("python", "pytorch", "cuda-version", "cuda-nvcc", "numpy", "ninja", "matplotlib", "pytest", "nbval",
                 "pip"):
        assert need in conda, f"environment.yml does not install {need}"
    # One CUDA for the whole environment: cuda-version selects pytorch's CUDA build and nvcc's version.
    assert re.fullmatch(r"=?\d+\.\d+", conda["cuda-version"]), "pin cuda-version to one major.minor (e.g. =13.0)"
    assert conda["cuda-nvcc"] in ("", "=" + conda["cuda-version"].lstrip("=") + ".*"), (
        "cuda-nvcc must follow cuda-version (leave it unpinned or pin the same major.minor)")
    # The torch range includes the version setup.sh installs.
    torch_spec = conda["pytorch"].split("=cuda")[0].strip()
    assert torch_spec and _in_range(_setup_torch_version(), torch_spec), (
        f"pytorch {torch_spec!r} in environment.yml excludes torch {_setup_torch_version()} that setup.sh installs")
    # The course package itself, editable, with the extras setup.sh installs.
    assert any(re.fullmatch(r"-e \.(\[[\w,]+\])?", p) for p in pip), "environment.yml must pip-install the course: -e ."
    # Python and pytest agree with pyproject.toml.
    py = (ROOT / "pyproject.toml").read_text()
    req = re.search(r'requires-python\s*=\s*">=\s*([0-9.]+)"', py).group(1)
    py_pin = re.search(r"([0-9.]+)", conda["python"]).group(1)
    assert _version_tuple(py_pin) >= _version_tuple(req), f"python {py_pin} is below pyproject's >= {req}"
    pytest_min = re.search(r'"pytest>=([0-9.]+)"', py)
    if pytest_min:
        spec = conda["pytest"]
        m = re.search(r">=\s*([0-9.]+)", spec)
        assert m and _version_tuple(m.group(1)) >= _version_tuple(pytest_min.group(1)), (
            f"pytest in environment.yml ({spec or 'unpinned'}) must be >= {pytest_min.group(1)} as in pyproject.toml")
    # Linux only, said in the file.
    assert re.search(r"linux", (ROOT / "environment.yml").read_text(), re.I), "say which platforms are supported"


def test_version_spec_helper() -> None:
    """The small spec parser used above."""
    assert _in_range("2.13.0", ">=2.11,<2.14") and not _in_range("2.14.0", ">=2.11,<2.14")
    assert _in_range("2.13.0", "=2.13") and not _in_range("2.12.1", ">=2.13")


# ----------------------------------------------------------------------------------------------------
# Commands shown to learners
# ----------------------------------------------------------------------------------------------------

# One way to type a command, everywhere: `make <verb>` in the course's top folder (README, "Quick start"),
# which uses .venv by itself. `cudacourse check 1.1` and `python -m cudacourse ...` work only inside the
# activated .venv (in a plain shell: "command not found", or the system python's ModuleNotFoundError), so
# they may appear only where the same line or paragraph says so by mentioning `.venv`. Notebooks open
# with `make lab`. The workflows in templates/*.yml are left out: a CI runner pip-installs the course into
# its own python and has no .venv.
LEARNER_FILE = re.compile(r"README\.md|docs/[^/]+\.md|templates/.+\.py"
                          r"|(lessons|solutions)/.+\.(md|cu|cuh|h|cpp|py|sh|ipynb)")
VENV_ONLY = re.compile(r"\bcudacourse (check|grade|doctor|bench|profile|stubs|templates)\b|\bpython3? -m cudacourse\b")
JUPYTER = re.compile(r"\bjupyter[- ](lab|notebook)\b")
# A paragraph ends at a blank line (or an empty // or # comment line); a list item is a paragraph of its own.
PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t]*(?://|#)?[ \t]*\n)+|\n(?=[ \t]*(?:[-*]|\d+\.) )")


def learner_texts() -> list[tuple[str, str]]:
    """(path, text) of every committed learner-facing file; a notebook's text is its cells' sources."""
    docs = []
    for p in sorted(COMMITTED):
        if LEARNER_FILE.fullmatch(p) and (ROOT / p).exists():
            text = (ROOT / p).read_text()
            if p.endswith(".ipynb"):
                text = "\n\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
            docs.append((p, text))
    return docs


def venv_only_commands(doc: str, text: str) -> list[str]:
    """Lines of ``text`` that show a command which fails when typed in a plain shell as shown."""
    bad = []
    for paragraph in PARAGRAPH_BREAK.split(text):
        for line in paragraph.splitlines():
            if JUPYTER.search(line) or (VENV_ONLY.search(line) and ".venv" not in paragraph):
                bad.append(f"{doc}: {line.strip()}")
    return bad


def test_learner_commands_are_make_commands() -> None:
    """READMEs, docs, kernel and script headers and notebooks show `make ...`, not commands that need .venv."""
    bad = [b for doc, text in learner_texts() for b in venv_only_commands(doc, text)]
    assert not bad, ("these lines show a command that fails outside the activated .venv; write its make form "
                     "(make check T=1.1, make grade, make doctor, make bench, make lab), or say in the same "
                     "paragraph that it runs inside `.venv` (source .venv/bin/activate):\n  " + "\n  ".join(bad))


def test_command_check_catches_venv_only_commands() -> None:
    """The command check is not a no-op: it reads the files it should and flags what it should."""
    docs = {doc for doc, _ in learner_texts()}
    assert {"README.md", "lessons/01_relu/README.md", "lessons/01_relu/relu.cu", "solutions/01_relu/relu.cu",
            "lessons/01_relu/relu.ipynb", "lessons/06_training/train.py", "docs/INSTRUCTORS.md"} <= docs
    text = ("Check it with `cudacourse check 1.1`.\n\n"
            "Inside the activated `.venv` (source .venv/bin/activate):\n`cudacourse check 1.1`.\n\n"
            "//   python -m cudacourse bench --lessons 01_relu\n//\n// .venv is in the next paragraph\n\n"
            "jupyter lab lessons/01_relu/relu.ipynb\n\n"
            "- `make check T=1.1` (`cudacourse check 1.1` inside `.venv`)\n- `make grade` (`cudacourse grade`)\n\n"
            "import cudacourse as cc; .venv/bin/python -m cudacourse profile 01_relu relu; make check T=1.1\n")
    assert venv_only_commands("x.md", text) == [
        "x.md: Check it with `cudacourse check 1.1`.",
        "x.md: //   python -m cudacourse bench --lessons 01_relu",
        "x.md: jupyter lab lessons/01_relu/relu.ipynb",
        "x.md: - `make grade` (`cudacourse grade`)"]  # a list item is a paragraph of its own
