"""``python -m cudacourse <command>`` (or the ``cudacourse`` console command).

Commands: check, grade, doctor, bench, profile, sass, stubs, templates.
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m cudacourse <command> [options]   (or: cudacourse <command> [options])
       python -m cudacourse --version                 (the package's version and the course folder it reads)

commands:
  check    check one task (check 1.1), a lesson (check 01_relu), or every lesson you started, full messages
  grade    run the graded checks and print the points table (--help for options)
  doctor   show versions, GPU, chosen backend, and how to fix problems
  bench    time the lessons' kernels against PyTorch/cuBLAS on a GPU
  profile  memory-traffic counters of one lesson function on the simulator (profile 01_relu relu --size 4096)
  sass     what nvcc made of a launcher's kernels (no GPU needed): SASS, registers, occupancy (sass 01_relu relu)

maintainer commands (they never replace a file someone edited unless --force, which keeps a backup):
  stubs      regenerate lessons/ stubs from solutions/ (--check: fail if they drifted)
  templates  regenerate templates/ from the course model (--check: fail if they are stale)
"""


def _stubs(argv: list[str]) -> int:
    from cudacourse import stubs
    from cudacourse.generated import generator_main

    return generator_main(argv, verb="stubs", what="the exercise stubs in lessons/ from solutions/",
                          stale_word="drifted", check=stubs.drifted, write=lambda force: stubs.write_all(force=force))


def version_line() -> str:
    """``cudacourse 0.1.0 (course at ROOT)``, or where no course checkout is found, what to do."""
    from importlib.metadata import PackageNotFoundError, version

    from cudacourse.course import CourseModelError, course

    try:
        v = version("cudacourse")
    except PackageNotFoundError:
        v = "(not installed)"
    try:
        where = f"course at {course().root}"
    except CourseModelError as e:
        where = str(e)
    return f"cudacourse {v}: {where}"


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command's own ``main``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(version_line())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "check":
        from cudacourse.checkcmd import main as run
    elif cmd == "grade":
        from cudacourse.grading.cli import main as run
    elif cmd == "doctor":
        from cudacourse.doctor import main as run
    elif cmd == "bench":
        from cudacourse.bench import main as run
    elif cmd == "profile":
        from cudacourse.profile_cli import main as run
    elif cmd == "sass":
        from cudacourse.sass import main as run
    elif cmd == "stubs":
        return _stubs(rest)
    elif cmd == "templates":
        from cudacourse.templates import main as run
    else:
        print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
