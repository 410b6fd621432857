"""Grade the unchanged solution and ONE attack (argv[1]) in a --batch sim grade, like test_grader_attacks."""
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
from tests.test_grader_attacks import ROOT, HIDDEN_EXAMPLE, LESSON, TASKS, _copy_course, _processes_mentioning
from tests.attacks.corpus import build, forgeries, load
from cudacourse.grading import cli
name = sys.argv[1]
tmp = Path(tempfile.mkdtemp(prefix="one-attack-"))
course, hidden, batch, out = tmp / "course", tmp / "hidden", tmp / "batch", tmp / "out"
_copy_course(course); shutil.copytree(HIDDEN_EXAMPLE, hidden)
a = {x.id: x for x in load()}[name]
for n in ["solution", name]:
    shutil.copytree(ROOT / "solutions" / LESSON, batch / n / "lessons" / LESSON)
paths = {"REPORT": str(out / f"{name}.json"), "JUNIT": str(out / f"{name}.xml"), "HIDDEN": str(hidden),
         "COURSE": str(course), "NEIGHBOUR": str(batch / "solution"), **forgeries()}
for rel, text in build(a, course=ROOT, paths=paths).items():
    (batch / name / rel).write_text(text)
t0 = time.monotonic()
rc = cli.main(["--batch", str(batch), "--course", str(course), "--lessons", LESSON, "--tasks", *TASKS,
               "--hidden", str(hidden), "--backend", "sim", "--timeout", "20", "--jobs", "2",
               "--workdir", str(tmp / "work"), "--json", str(out), "--markdown", str(out)] + sys.argv[2:])
print("rc", rc, "in", round(time.monotonic() - t0), "s; left:", _processes_mentioning(str(tmp)))
for n in ["solution", name]:
    rep = json.loads((out / f"{n}.json").read_text())
    for t in rep["tasks"]:
        print(n, t["id"], t["status"], (t.get("message") or "")[:300].replace("\n", " | "))
print("tmp", tmp)
