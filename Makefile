# The few verbs a learner needs. Each one sets up .venv first (once), so nothing else is typed.
PY := .venv/bin/python
LESSONS ?=
ARGS ?=
T ?=
# Jupyter refuses to run as root unless told (containers, cloud GPU machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup check grade test lab bench doctor sass stubs templates clean

setup:
	@./setup.sh $(EXTRAS)

# Tools only some verbs need are installed by those verbs, the first time (the learner's first command is quicker).
# (make test needs the dev extra only: nbval brings the notebook kernel; jupyter itself, the notebooks extra, cost
# make test ~20 s of installing after make grade on a clean clone, and only make lab uses it)
test: EXTRAS := dev
TEST_WORKERS ?= $(shell $(PY) -c "import os; print(len(os.sched_getaffinity(0)) + 1)")
lab: EXTRAS := notebooks
sass: EXTRAS := sass

check: setup  ## check one task with full messages: make check T=1.1 (a lesson: T=01_relu; nothing: lessons started)
	@$(PY) -m cudacourse check $(T) $(ARGS)

grade: setup  ## grade your work in lessons/ on the detected backend (GPU or CPU simulator); ARGS=--verbose: every message
	@$(PY) -m cudacourse grade $(if $(LESSONS),--lessons $(LESSONS)) $(ARGS)

test: setup   ## the course's own test suite (what CI runs)
	@$(PY) -m cudacourse stubs --check
	@$(PY) -m ruff check cudacourse tests benchmarks solutions lessons/*/bench.py
	@# --durations: every run (CI included) names its longest tests; --cpu-durations the tests that cost the most CPU
	@# (tests/conftest.py: on 2 cores the suite is CPU-bound, and wall seconds say more about a test's neighbours);
	@# --cpu-report every test's, which benchmarks/suite_by_check.py groups by the promise each kind of check keeps.
	@# --no-loadscope-reorder: work is handed out in tests/conftest.py's order, the longest units first.
	@# One worker more than cores: the longest units (the grader's attack and corpus batches) spend much of their time
	@# waiting out the timeouts their hostile cases earn, and with a worker per core a third of the 2-core machine's
	@# core-seconds went idle (fresh clones, 2026-11-29: pytest 17:07 with 2 workers; 15:04 to 19:27 with 3, a spread
	@# this machine shows for the same code; 4 workers were slower).
	@$(PY) -m pytest tests --impl=solution -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not gpu" --durations=25 \
		--cpu-durations=25 --cpu-report=.cudacourse-build/suite_cpu.json
	@# On a GPU the timed tests (marker gpu) run afterwards, one at a time: beside other tests they time their
	@# neighbours too (flash bf16 measured 0.38x under xdist on the H100, its target alone). CPU: not graded.
	@if [ "$$($(PY) -c 'from cudacourse.loader import backend_name; print(backend_name())')" = cuda ]; then \
		$(PY) -m pytest tests --impl=solution -q -n 0 -m gpu; fi
	@# The notebooks side by side, each on one worker (--dist loadfile keeps a notebook's cells in order, in one
	@# kernel): a kernel keeps about one core busy, so one after another they left the second core idle.
	@CUDA_COURSE_IMPL=solution $(PY) -m pytest --nbval-lax -q -p no:randomly -n logical --dist loadfile lessons/*/*.ipynb

lab: setup    ## open the notebooks (extra options: make lab ARGS="--no-browser --port 8899")
	@$(PY) -m jupyter lab $(ROOT_FLAG) $(ARGS) lessons/

bench: setup  ## time the solutions on a GPU (results/<gpu>/)
	@$(PY) -m cudacourse bench $(if $(LESSONS),--lessons $(LESSONS)) $(ARGS)

sass: setup   ## what the compiler made of a launcher's kernels, with registers and occupancy: make sass ARGS="01_relu relu_v3_float4"
	@$(PY) -m cudacourse sass $(ARGS)

doctor: setup
	@$(PY) -m cudacourse doctor $(ARGS)

stubs: setup  ## (maintainers) regenerate lessons/ stubs from solutions/; refuses to replace an edited file (ARGS=--force keeps a backup)
	@$(PY) -m cudacourse stubs $(ARGS)

templates: setup  ## (maintainers) regenerate templates/ from the course model; refuses to replace an edited file
	@$(PY) -m cudacourse templates $(ARGS)

clean:
	rm -rf .cudacourse-build .pytest_cache
