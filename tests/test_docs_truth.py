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

import functools
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
                k = j
                while k + 1 < len(lines) and lines[k + 1].strip():  # the Source paragraph, up to a blank line
                    k += 1
                for m in SOURCE_PATH.finditer("\n".join(lines[j:k + 1])):
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


# A column headed with a GPU's name holds that GPU's figures only: they must be in a cited file of that GPU's
# results folder (results/nvidia-h100-.../, results/nvidia-h200/), so an H200 figure cannot hide behind an H100
# file or the reverse. GPU names are matched whole: "H100" does not match "H1000".
GPU_OF_COLUMN = re.compile(r"\b(H100|H200|A100|L40S?|B200)\b", re.I)


def column_gpu(header: str) -> str | None:
    """The GPU a column's header names (lower case, e.g. ``h200``), or None."""
    m = GPU_OF_COLUMN.search(header)
    return m.group(1).lower() if m else None


def missing_figures(table: Table, pool: list[Decimal], pools: dict[str, list[Decimal]] | None = None) -> list[str]:
    """The numbers of ``table`` (label columns and code spans aside) that ``pool`` does not hold; a column whose
    header names a GPU is looked up in ``pools[gpu]`` (the numbers of the cited files of that GPU) instead."""
    skip = {i for i, h in enumerate(table.header) if h.strip("* ").lower().split(" (")[0] in SKIP_COLUMNS}
    gpus = {i: column_gpu(h) for i, h in enumerate(table.header)}
    missing = []
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row):
            if c in skip:
                continue
            gpu = gpus.get(c)
            use = pool if gpu is None or pools is None else pools.get(gpu, [])
            where = "" if gpu is None or pools is None else f" (an {gpu.upper()} column: {gpu} files only)"
            missing += [f"row {r + 1} '{cell}': {tok}{where}" for tok in numbers_in_cell(cell) if not appears(tok, use)]
    return missing


def gpu_pools(table: Table) -> dict[str, list[Decimal]]:
    """For each GPU a column of ``table`` names, the numbers of the cited files under that GPU's results folder."""
    pools: dict[str, list[Decimal]] = {}
    for h in table.header:
        gpu = column_gpu(h)
        if gpu:
            pools[gpu] = [n for s in table.sources if s in COMMITTED and f"nvidia-{gpu}" in s for n in file_numbers(s)]
    return pools


@pytest.mark.parametrize("table", [t for t in ALL_TABLES if t.sources], ids=lambda t: f"{t.doc}:{t.line}")
def test_measured_numbers_appear_in_source(table: Table) -> None:
    """Every figure of a sourced table is one of the numbers in its source files (up to rounding)."""
    pool = [n for s in table.sources if s in COMMITTED for n in file_numbers(s)]
    missing = missing_figures(table, pool, gpu_pools(table))
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


def test_a_gpu_column_is_checked_against_that_gpus_files_only() -> None:
    """An H200 figure in the H100 column (or the reverse) is reported, though the table cites both files."""
    text = ("| kernel | H100 | H200 |\n|---|---|---|\n| relu | 0.712 ms | 0.505 ms |\n| sum | 0.505 ms | 0.712 ms |\n\n"
            "Source: H100: [a](../../results/nvidia-h100-80gb-hbm3/results.md); "
            "H200: [b](../../results/nvidia-h200/results.md)\n")
    (t,) = tables("lessons/01_relu/README.md", text)
    assert t.sources == ["results/nvidia-h100-80gb-hbm3/results.md", "results/nvidia-h200/results.md"]
    pools = {"h100": [Decimal("0.712")], "h200": [Decimal("0.505")]}
    got = missing_figures(t, pools["h100"] + pools["h200"], pools)
    assert got == ["row 2 '0.505 ms': 0.505 (an H100 column: h100 files only)",
                   "row 2 '0.712 ms': 0.712 (an H200 column: h200 files only)"]
    assert missing_figures(t, pools["h100"] + pools["h200"]) == []  # without the rule both would pass
    assert column_gpu("speed, H200 (same sizes)") == "h200" and column_gpu("speed (H1000)") is None


def test_every_committed_gpu_has_a_column_in_the_readme() -> None:
    """The top README's measured table shows every GPU with a committed results.md (H100 and H200 today)."""
    gpus = {p.split("/")[1] for p in COMMITTED if re.fullmatch(r"results/nvidia-[^/]+/results\.md", p)}
    assert {"nvidia-h100-80gb-hbm3", "nvidia-h200"} <= gpus
    (measured,) = [t for t in tables("README.md") if t.sources]
    named = {column_gpu(h) for h in measured.header} - {None}
    for g in gpus:
        short = re.match(r"nvidia-([a-z]\d+)", g).group(1)
        assert short in named, f"README.md's measured table has no column for {g} (results/{g}/results.md)"
        assert any(f"results/{g}/" in s for s in measured.sources), f"README.md's Source line does not cite {g}"


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


# ----------------------------------------------------------------------------------------------------
# Task tables state the graded threshold
# ----------------------------------------------------------------------------------------------------

THRESHOLD_HEADER = "graded threshold"


def _course():  # noqa: ANN202 (cudacourse's Course; imported late so a collection error names this file)
    from cudacourse.course import course

    return course(ROOT)


@functools.cache
def task_test_sources(test_file: str) -> tuple[dict[str, str], set[str]]:
    """The source text of each graded test function of ``tests/<test_file>`` by task id (functions of one task
    joined), and the names of the module's functions that read lesson.toml's target (call ``_target(``)."""
    import ast

    text = (ROOT / "tests" / test_file).read_text()
    tree = ast.parse(text)
    by_task: dict[str, str] = {}
    readers = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        src = ast.get_source_segment(text, node) or ""
        if "_target(" in src and node.name != "_target":
            readers.add(node.name)
        for d in node.decorator_list:
            if (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "task" and d.args
                    and isinstance(d.args[0], ast.Constant)):
                by_task[d.args[0].value] = by_task.get(d.args[0].value, "") + "\n" + src
    return by_task, readers


def graded_threshold(lesson: object, task: object) -> tuple[Decimal | None, str]:
    """(the number a speed task is graded against, where it comes from): lesson.toml's ``target``, the one place
    that holds it (:func:`test_speed_tests_take_their_targets_from_lesson_toml` keeps the tests from holding
    another)."""
    if task.target is None:
        return None, ""
    return Decimal(str(task.target)), f"lessons/{lesson.id}/lesson.toml"


def task_table(doc: str, text: str | None = None) -> Table | None:
    """The task table of a lesson explainer: the first table whose header has a task and a points column."""
    for t in tables(doc, text):
        low = [h.lower() for h in t.header]
        if "task" in low and "points" in low:
            return t
    return None


def threshold_mismatches(t: Table, expected: dict[str, Decimal | None]) -> list[str]:
    """Rows of task table ``t`` whose threshold cell does not hold exactly the graded number (or holds one where
    the task has none). ``expected``: task id -> graded threshold (None: no threshold)."""
    low = [h.lower() for h in t.header]
    if THRESHOLD_HEADER not in low:
        return [f"{t.doc}:{t.line}: the task table has no '{THRESHOLD_HEADER}' column"]
    col, task_col = low.index(THRESHOLD_HEADER), low.index("task")
    bad = []
    for row in t.rows:
        if len(row) != len(t.header):
            bad.append(f"{t.doc}:{t.line}: task {row[0]}: {len(row)} cells under a {len(t.header)}-column header")
            continue
        tid, cell = row[task_col].strip("* "), row[col]
        nums = [Decimal(n) for n in numbers_in_cell(cell)]
        want = expected.get(tid)
        if want is None and nums:
            bad.append(f"{t.doc}: task {tid} has no graded threshold, the table says '{cell}'")
        elif want is not None and nums != [want]:
            bad.append(f"{t.doc}: task {tid} is graded at {want}, the table's threshold cell says '{cell}'")
    return bad


def test_task_tables_state_the_graded_threshold() -> None:
    """Every lesson's task table has a 'graded threshold' column holding exactly the number each speed task is
    graded against (lesson.toml's target, or the test's own number where the test does not read it), and
    nothing for the other tasks; the aim, where higher, sits in a column of its own."""
    bad, seen = [], 0
    for lesson in _course():
        doc = f"lessons/{lesson.id}/README.md"
        t = task_table(doc)
        assert t is not None, f"{doc}: no task table (a header with 'task' and 'points')"
        expected = {task.id: graded_threshold(lesson, task)[0] for task in lesson.tasks}
        listed = {row[0].strip("* ") for row in t.rows}
        bad += [f"{doc}: task {tid} (graded threshold {v}) is not in the task table"
                for tid, v in expected.items() if v is not None and tid not in listed]
        bad += threshold_mismatches(t, expected)
        seen += sum(v is not None for v in expected.values())
    assert seen >= 20, f"only {seen} graded thresholds found: the check has gone blind"
    assert not bad, "task tables disagree with the graded thresholds:\n  " + "\n  ".join(bad)


def test_threshold_check_catches_an_aim_in_the_threshold_column() -> None:
    """The old lesson 05 row (the aim, 0.45x, where 0.28 is graded), a threshold on a task without one and a
    missing column are all reported."""
    text = ("| task | where | what | graded threshold | aim, if higher | points |\n|---|---|---|---|---|---|\n"
            "| 5.7 | (GPU) | `wmma_gemm_tiled` | 0.25x | | 1 |\n| 5.8 | (GPU) | `mma_gemm_pipelined` | 0.45x | | 2 |\n"
            "| 5.1 | `bf16.cu` | bias+GELU | 0.9 | | 2 |\n")
    t = task_table("lessons/05_tensor_cores/README.md", text)
    got = threshold_mismatches(t, {"5.7": Decimal("0.25"), "5.8": Decimal("0.28"), "5.1": None})
    doc = "lessons/05_tensor_cores/README.md"
    assert got == [f"{doc}: task 5.8 is graded at 0.28, the table's threshold cell says '0.45x'",
                   f"{doc}: task 5.1 has no graded threshold, the table says '0.9'"]
    old = task_table("x.md", "| task | what | points |\n|---|---|---|\n| 5.8 | 0.45x cuBLAS | 2 |\n")
    want = ["x.md:1: the task table has no 'graded threshold' column"]
    assert threshold_mismatches(old, {"5.8": Decimal("0.28")}) == want


def test_speed_tests_take_their_targets_from_lesson_toml() -> None:
    """One number per speed task, declared once (DESIGN: the course model holds the speed targets): no graded
    test passes a target of its own to ``speed.judge`` (3.6 and 4.10-4.12 graded 0.30, 0.8, 0.8, 1.0 while
    lesson.toml held the bench's 0.8, 1.0, 1.0, 1.3), and every speed task declares its target and margin."""
    c = _course()
    for les in c:
        sources, _ = task_test_sources(les.test_file)
        for task in les.tasks:
            src = sources.get(task.id, "")
            assert not re.search(r"\bjudge\((?:[^()]|\([^()]*\))*\btarget\s*=", src, re.S), (
                f"task {task.id}'s test passes its own target to judge(): put it in lessons/{les.id}/lesson.toml")
            if task.gpu and ("judge(" in src or "_target(" in src):
                assert task.target is not None and task.margin is not None, f"task {task.id} declares no target/margin"
