# The few verbs a learner needs. Each one sets up .venv first (once), so nothing else is typed.
PY := .venv/bin/python
LESSONS ?=

.PHONY: setup grade test lab bench doctor stubs clean

setup:
	@./setup.sh

grade: setup  ## grade your work in lessons/ on the detected backend (GPU or CPU simulator)
	@$(PY) -m cudacourse grade $(if $(LESSONS),--lessons $(LESSONS))

test: setup   ## the course's own test suite (what CI runs)
	@$(PY) -m cudacourse stubs --check
	@$(PY) -m ruff check cudacourse tests
	@$(PY) -m pytest tests --impl=solution -q -n 2 --dist loadgroup
	@CUDA_COURSE_IMPL=solution $(PY) -m pytest --nbval-lax -q -p no:randomly lessons/*/*.ipynb

lab: setup    ## open the notebooks
	@$(PY) -m jupyter lab lessons/

bench: setup  ## time the solutions on a GPU (results/<gpu>/)
	@$(PY) -m cudacourse bench $(if $(LESSONS),--lessons $(LESSONS))

doctor: setup
	@$(PY) -m cudacourse doctor

stubs: setup  ## regenerate lessons/ stubs from solutions/
	@$(PY) -m cudacourse stubs

clean:
	rm -rf .cudacourse-build .pytest_cache
