# Two commands do everything: `make run` and `make test`. Both bootstrap .venv (TensorFlow
# 2.15 + Horovod, the main stack) idempotently; `make test` also .venv-keras3 (TensorFlow 2.21,
# Keras 3 and JAX, no Horovod), lints (ruff) and builds the docs (mkdocs --strict) before the tests. Each step leaves
# a stamp so an already set-up machine skips it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export TF_CPP_MIN_LOG_LEVEL ?= 2

VENV_KERAS3 := .venv-keras3
BIN_KERAS3 := $(VENV_KERAS3)/bin
TENSORFLOW_KERAS3 := tensorflow-cpu==2.21.0
# JAX (CPU) for LARS and LAMB on Keras 3's JAX backend (tests/optimizers/test_jax_backend.py):
# about 90 MB of wheels, 380 MB installed, seconds to install from pip's cache.
JAX_KERAS3 := jax==0.10.2 jaxlib==0.10.2

.PHONY: setup setup-keras3 run test test-keras3 test-fast docs lint bench study study-v3 study-v4 data clean-venv

setup: $(VENV)/.lbtrain-installed $(VENV)/.kernels data

# lbtrain's compiled CPU kernels (lbtrain/kernels/: ghost batch norm), one library per TensorFlow
# version in the source tree; rebuilt when the source changes. Without them lbtrain runs on
# TensorFlow ops, only slower.
$(VENV)/.kernels: $(VENV)/.lbtrain-installed lbtrain/kernels/ghost_batch_norm.cc
	$(BIN)/python -m lbtrain.kernels || echo 'lbtrain: no kernel built: ghost batch norm runs on TensorFlow ops'
	touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

# TensorFlow first: Horovod compiles against the installed TensorFlow.
$(VENV)/.tensorflow: $(BIN)/python
	$(BIN)/pip install --quiet tensorflow-cpu==2.15.1
	touch $@

# Built from source against this TensorFlow (~2 min on 2 cores) without pip's wheel cache,
# which would hand back a Horovod built another way; lbtrain keeps its own, keyed by Horovod,
# TensorFlow, Python and the build flags, and checks `horovodrun --check-build` on every install.
$(VENV)/.horovod: $(VENV)/.tensorflow scripts/install_horovod.py
	$(BIN)/python scripts/install_horovod.py
	touch $@

$(VENV)/.lbtrain-installed: $(VENV)/.horovod pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,postgres,docs]'
	touch $@

data:
	@sh scripts/install_fashion_mnist.sh

run: setup
	$(BIN)/lbtrain run experiments/quickstart.yaml
	$(BIN)/lbtrain report results/quickstart

# The second-edition studies behind results/README.md (about 4.5 hours on 2 cores; resumable).
study: setup
	LBTRAIN=$(BIN)/lbtrain PYTHON=$(BIN)/python sh scripts/run_studies.sh

# The third-edition studies (about 9 hours on 2 cores; resumable: rerun after an interruption).
study-v3: setup
	LBTRAIN=$(BIN)/lbtrain sh scripts/run_studies_v3.sh

# The fourth-edition studies (about 16 machine hours on 2 cores, over several sessions;
# resumable: rerun after an interruption).
study-v4: setup
	LBTRAIN=$(BIN)/lbtrain sh scripts/run_studies_v4.sh

# Keras 3: TensorFlow 2.21 from PyPI (pip's cache reused), lbtrain without Horovod.
$(BIN_KERAS3)/python:
	$(PYTHON) -m venv $(VENV_KERAS3)
	$(BIN_KERAS3)/pip install --quiet --upgrade pip setuptools wheel

$(VENV_KERAS3)/.lbtrain-installed: $(BIN_KERAS3)/python pyproject.toml
	$(BIN_KERAS3)/pip install --quiet $(TENSORFLOW_KERAS3)
	$(BIN_KERAS3)/pip install --quiet -e '.[dev,postgres,tensorboard]'
	touch $@

# After TensorFlow (order only: a new lbtrain install does not redo it), so that pip resolves JAX
# against the NumPy and ml_dtypes TensorFlow brought.
$(VENV_KERAS3)/.jax: | $(VENV_KERAS3)/.lbtrain-installed
	$(BIN_KERAS3)/pip install --quiet $(JAX_KERAS3)
	touch $@

$(VENV_KERAS3)/.kernels: $(VENV_KERAS3)/.lbtrain-installed lbtrain/kernels/ghost_batch_norm.cc
	$(BIN_KERAS3)/python -m lbtrain.kernels || echo 'lbtrain: no kernel built: ghost batch norm runs on TensorFlow ops'
	touch $@

setup-keras3: $(VENV_KERAS3)/.lbtrain-installed $(VENV_KERAS3)/.jax $(VENV_KERAS3)/.kernels data

# pytest-xdist: TEST_WORKERS processes per stack (logical: one per logical core), each idle worker taking
# tests from the other's queue (worksteal); tests/conftest.py starts the modules with slow tests.
# --durations prints the slowest tests of each stack, so every CI log says where the suite's time goes.
TEST_WORKERS ?= logical
PYTEST := pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

# The two stacks are set up side by side (pip keeps one core busy for each), then lint and docs.
test:
	@$(MAKE) --no-print-directory -j2 setup setup-keras3 lint docs
	$(BIN)/python -m $(PYTEST)
	$(BIN_KERAS3)/python -m $(PYTEST)

test-keras3: setup-keras3
	$(BIN_KERAS3)/python -m $(PYTEST)

test-fast: setup
	$(BIN)/python -m $(PYTEST) -m "not slow"

# The documentation site (mkdocs.yml, docs/): a broken link, anchor, snippet or API reference
# fails the build. The API reference reads lbtrain's source (griffe), importing no TensorFlow.
# NO_MKDOCS_2_WARNING silences mkdocs-material's banner about MkDocs 2.0, which is not a warning
# of this site's.
docs: $(VENV)/.lbtrain-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: $(VENV)/.lbtrain-installed
	$(BIN)/ruff check lbtrain lab tests scripts benchmarks

# LARS/LAMB against SGD/Adam, the trainer against plain fit compiled and not (jit.json), ghost batch
# norm in a simulated world of 64 against one worker (trainer.json's part c), throughput (lbtrain
# bench: CSV, JSON and plot in results/benchmarks/bench/), Horovod against the independent pair
# (results/benchmarks/horovod.json), the input pipeline with and without tf.data's autotuning model
# (pipeline.json), a 12-run grid one run at a time and side by side with its busy share and price
# (parallel.json), then the performance table of docs/benchmarks.md from the JSON.
bench: setup
	$(BIN)/python benchmarks/bench_optimizers.py
	$(BIN)/python benchmarks/bench_jit.py
	$(BIN)/python benchmarks/bench_trainer.py --parts c
	$(BIN)/lbtrain bench
	$(BIN)/python benchmarks/bench_horovod.py
	$(BIN)/python benchmarks/bench_pipeline.py
	$(BIN)/python benchmarks/bench_parallel.py
	$(BIN)/python scripts/render_benchmarks.py --write

clean-venv:
	rm -rf $(VENV) $(VENV_KERAS3)
