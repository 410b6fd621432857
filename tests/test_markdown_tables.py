"""Every Markdown table of the course renders as the table its author meant (issue 34 item 4, issue 37).

A real CommonMark parser with GitHub's table extension (markdown-it-py: CommonMark plus its ``table`` rule)
reads every committed ``README.md``, ``docs/*.md`` and notebook markdown cell. Two ways a table breaks on GitHub:

- its delimiter row has a different number of cells than its header: GFM then renders no table at all, only
  the pipes as text (lesson 05's task table did: 4 header cells over a 5-cell delimiter row);
- a body row has more cells than the header: GFM drops the extra cells silently (a figure disappears), or
  fewer: the row is padded with empty cells.

The parser finds the tables it renders; the source lines of each rendered table are then compared with its
header's cell count. A block of lines that look like a table (a ``|`` row followed by a ``|---|`` row) but
that the parser does not render as a table is reported too.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (the dev extra) parses the Markdown")

ROOT = Path(__file__).resolve().parent.parent
DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def _parser() -> object:
    """CommonMark with GFM's table extension (GitHub renders READMEs and notebooks' cells with GFM)."""
    return markdown_it.MarkdownIt("commonmark").enable("table")


def _committed() -> list[str]:
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        pytest.skip("needs the course's git checkout (which files are committed)", allow_module_level=True)
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.split("\0") if p)


def documents() -> list[tuple[str, str]]:
    """(name, markdown) of every README.md, docs/*.md and notebook markdown cell (one entry per cell)."""
    docs = []
    for p in _committed():
        path = ROOT / p
        if not path.exists():
            continue
        if p.endswith("README.md") or re.fullmatch(r"docs/[^/]+\.md", p):
            docs.append((p, path.read_text()))
        elif p.endswith(".ipynb"):
            for i, cell in enumerate(json.loads(path.read_text())["cells"]):
                if cell["cell_type"] == "markdown":
                    docs.append((f"{p} (cell {i})", "".join(cell["source"])))
    return docs


def split_row(line: str) -> list[str]:
    """The cells of a table row as GFM splits them: outer pipes optional, ``\\|`` and pipes in code spans are
    not separators (GFM: a pipe inside a code span must be escaped; an unescaped one still splits)."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return re.split(r"(?<!\\)\|", s)


def table_problems(name: str, text: str) -> list[str]:
    """What is wrong with the tables of one Markdown text: rendered tables whose rows do not have the header's
    cell count, and table-like blocks that do not render as tables."""
    md = _parser()
    tokens = md.parse(text)
    lines = text.splitlines()
    problems, rendered_starts = [], set()
    for tok in tokens:
        if tok.type != "table_open" or not tok.map:
            continue
        start, end = tok.map
        rendered_starts.add(start)
        header = len(split_row(lines[start]))
        for k in range(start + 1, end):
            if not lines[k].strip():
                continue
            n = len(split_row(lines[k]))
            if n != header:
                what = "delimiter row" if k == start + 1 else "row"
                problems.append(f"{name}:{k + 1}: {what} has {n} cells, the header {header}")
    # table-like blocks the parser did not render (outside code fences: the parser's own tokens say where those are)
    fenced = set()
    for tok in tokens:
        if tok.type in ("fence", "code_block") and tok.map:
            fenced.update(range(*tok.map))
    for i in range(len(lines) - 1):
        starts_block = i == 0 or not lines[i - 1].lstrip().startswith("|")
        if (i not in fenced and i not in rendered_starts and starts_block and lines[i].lstrip().startswith("|")
                and DELIMITER.match(lines[i + 1]) and "-" in lines[i + 1]):
            problems.append(f"{name}:{i + 1}: looks like a table but does not render as one (header "
                            f"{len(split_row(lines[i]))} cells, delimiter row {len(split_row(lines[i + 1]))})")
    return problems


def test_every_markdown_table_renders() -> None:
    """Every table of every README, docs page and notebook markdown cell has rows of its header's width."""
    docs = documents()
    assert any(n == "lessons/05_tensor_cores/README.md" for n, _ in docs) and any("ipynb" in n for n, _ in docs)
    problems = [p for name, text in docs for p in table_problems(name, text)]
    assert not problems, "Markdown tables that do not render as written:\n  " + "\n  ".join(problems)


def test_the_check_sees_tables() -> None:
    """Guard against a silent no-op: the parser finds many rendered tables in the course's documents."""
    md = _parser()
    count = sum(tok.type == "table_open" for _, text in documents() for tok in md.parse(text))
    assert count >= 30, f"only {count} tables rendered"


def test_a_broken_table_is_reported() -> None:
    """Lesson 05's old task table (4 header cells over a 5-cell delimiter) does not render and is reported; a
    row with an extra cell is reported; a good table and a table shown in a code fence are not."""
    broken = "| task | where | what | points |\n|---|---|---|---|---|\n| 5.1 | `bf16.cu` | bias | 2 |\n"
    assert table_problems("a.md", broken) == [
        "a.md:1: looks like a table but does not render as one (header 4 cells, delimiter row 5)"]
    extra = "| a | b |\n|---|---|\n| 1 | 2 | 3 |\n| 4 | 5 |\n"
    assert table_problems("b.md", extra) == ["b.md:3: row has 3 cells, the header 2"]
    good = "| a | b |\n|---|---|\n| `x \\| y` | 2 |\n\n```\n| c | d |\n|---|---|---|\n```\n"
    assert table_problems("c.md", good) == []
