# Two commands do everything: `make run` and `make test`. Both bootstrap .venv
# idempotently; each step leaves a stamp so an already set-up machine skips it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export TF_CPP_MIN_LOG_LEVEL ?= 2

HOROVOD_BUILD_ENV := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 \
	HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1

.PHONY: setup run test test-fast bench study data clean-venv

setup: $(VENV)/.lbtrain-installed data

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

# TensorFlow first: Horovod compiles against the installed TensorFlow.
$(VENV)/.tensorflow: $(BIN)/python
	$(BIN)/pip install --quiet tensorflow-cpu==2.15.1
	touch $@

# Built from source (~2 min on 2 cores); pip caches the wheel for the next venv.
$(VENV)/.horovod: $(VENV)/.tensorflow
	$(BIN)/pip install --quiet cmake psutil cloudpickle packaging pyyaml
	$(HOROVOD_BUILD_ENV) $(BIN)/pip install --quiet --no-build-isolation horovod==0.28.1
	$(BIN)/horovodrun --check-build > $(VENV)/horovod-check-build.txt
	grep -q '\[X\] TensorFlow' $(VENV)/horovod-check-build.txt
	grep -q '\[X\] Gloo' $(VENV)/horovod-check-build.txt
	touch $@

$(VENV)/.lbtrain-installed: $(VENV)/.horovod pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

data:
	@sh scripts/install_fashion_mnist.sh

run: setup
	$(BIN)/lbtrain run experiments/quickstart.yaml
	$(BIN)/lbtrain report results/quickstart

# The canonical studies behind results/README.md (about an hour on 2 cores; resumable).
study: setup
	LBTRAIN=$(BIN)/lbtrain sh scripts/run_studies.sh

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/bench_optimizers.py

clean-venv:
	rm -rf $(VENV)
