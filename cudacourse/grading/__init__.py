"""Grading: grade the course's kernels, or learners' submissions, task by task.

What it does, in order:

1. **Stage.** Into a fresh folder it copies the instructor's harness (``cudacourse/``, the lessons'
   graded test files, ``tests/conftest.py``, the ``--hidden`` test files) and only the *kernel files*
   declared in each lesson's ``lesson.toml`` (exercise files; support files come from
   the checkout): from ``DIR/lessons/NN_topic/`` for a ``--submission``, else
   from this checkout's ``lessons/`` or ``solutions/`` (``--impl``). Nothing else of a submission is
   used, so an edited ``tests/`` folder in it changes nothing.
2. **Screen.** Every submitted kernel file is checked before it is built (:func:`screen_kernel_file`):
   kernel-only exercise files may include CUDA and C++ standard headers only (no torch, no relative
   paths leaving the lesson, no file or process calls), and lesson 01's ``relu_torch.cu`` (the one file
   allowed torch) must launch the learner's kernel with ``<<<...>>>`` and call no torch operator that
   would compute the answer. A rejected file is staged so that it fails to build at once, so exactly
   the tasks that need it fail, with the reason.
3. **Collect** the tasks once (``pytest --collect-only`` with the course plugin): a task is every test
   carrying ``@pytest.mark.task(ID)``, public and hidden ones together; its title and points come from the
   instructor's course model (``lessons/*/lesson.toml``, and ``tasks.toml`` of ``--hidden``).
4. **Run.** The tasks of a lesson share one pytest process (split over ``--jobs`` processes when
   there is room), in a private copy of the staged folder ("slot") that is restored from its pristine
   manifest before each process and compared after it. The lesson's kernel files are built first (up
   to ``--build-timeout``); then a watchdog stops a process whose current test case has run for more
   than ``--timeout`` s. A case that crashes or hangs fails its own task (the message names it) and the
   unfinished tasks go on in a fresh process; on a GPU every task that failed in company is graded
   again in a process of its own, and that verdict counts. So a crash, an endless loop, an illegal
   address or a corrupted CUDA context costs only its own task, and a file changed by the submission's code fails
   the task that changed it (the change is undone). Inputs are drawn from a seed chosen afresh for the
   run (``--seed`` replays one), so answers cached from the public tests do not survive.
5. **Feedback and reports.** Feedback (hints, hidden-case wording) is computed from the results after
   every run. A points table on stdout, and ``--json``, ``--junit``, ``--markdown``, ``--gradescope`` files, always
   written (a grading problem is recorded in them too). The exit code says whether grading worked (0),
   not the score; 2 means the grader itself could not grade (bad arguments, broken instructor tests).

JSON schema (fixed)::

    {"backend", "device", "impl", "earned", "possible", "not_graded",
     "tasks": [{"id", "lesson", "title", "points", "earned", "status": "pass|fail|not-graded", "message"}]}

``possible`` counts every task's points, ``not_graded`` the points of tasks that need a GPU.

``--batch PARENT`` grades every sub-folder of PARENT as one submission in one run; ``--json``,
``--junit`` and ``--markdown`` then name folders that receive ``<name>.json`` etc., and the JSON folder
also gets ``gradebook.csv``.

Learner code is untrusted native code: it runs only in worker processes confined by the operating system
(``cudacourse/sandbox/``: Landlock, user/PID/network/mount namespaces, a pids cgroup or RLIMIT_NPROC, rlimits),
and the process that compares outputs and writes reports never loads it. Where a mechanism is missing the grade
still runs, as confined as the machine allows, and every report says "unconfined" and why (docs/CONFINEMENT.md).

Processes are started in four places: the grader's task processes and warm-up builds
(``processes.start_worker``), the GPU and torch workers (``cudacourse/workers/channel.py``), and the simulator's
worker and its confined compiles (``cudacourse/sim/``); all of them through ``sandbox.confined_popen``.
docs/ARCHITECTURE.md draws them.

Modules: :mod:`~cudacourse.grading.cli` (arguments, the grade's flow), :mod:`~cudacourse.grading.plan` (what runs,
in which groups: pure functions and the run's configuration), :mod:`~cudacourse.grading.session` (the live state of
a grade), :mod:`~cudacourse.grading.runner` (task processes, watchdog), :mod:`~cudacourse.grading.builds` and
:mod:`~cudacourse.grading.build_worker` (warm-up builds), :mod:`~cudacourse.grading.processes` (starting a
confined process), :mod:`~cudacourse.grading.verdicts`, :mod:`~cudacourse.grading.protocol` (the contract with the
task processes), :mod:`~cudacourse.grading.screens`, :mod:`~cudacourse.grading.staging`,
:mod:`~cudacourse.grading.feedback`, :mod:`~cudacourse.grading.reports`; the task/result model is
:mod:`cudacourse.results`.
"""
