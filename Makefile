# horovod-torus: one-command set-up, tests and demo. Every target is idempotent.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
STAMPS  := $(VENV)/.stamps
APT_PKGS := openmpi-bin libopenmpi-dev dataset-fashion-mnist
HVD_FLAGS := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
             HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
NP ?= 4

.PHONY: help setup test unit parallel demo bench clean
help:
	@echo "make setup   install apt packages, .venv, the pinned stack and Horovod 0.28.1 (idempotent)"
	@echo "make test    setup + unit tests + multi-rank tests under mpirun and horovodrun"
	@echo "make demo    setup + ResNet-50 on Fashion-MNIST, 4 ranks on a 2x2 torus"
	@echo "make bench   setup + the all-reduce benchmark sweep (mpi_scripts/bench.sh)"

setup: $(STAMPS)/horovod $(STAMPS)/project
	@$(VENV)/bin/horovodrun --check-build | tee $(STAMPS)/check-build.txt
	@for w in TensorFlow MPI Gloo; do \
	  grep -Eq "\[X\] $$w" $(STAMPS)/check-build.txt || { echo "ERROR: Horovod was built without $$w (see above); rm -rf $(VENV) and run make setup again" >&2; exit 1; }; done

$(STAMPS)/apt:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "apt-get install$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; fi
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: requirements.txt constraints.txt $(STAMPS)/apt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q -r requirements.txt -c constraints.txt
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/horovod: $(STAMPS)/venv
	@if ! $(PY) -c "import horovod.tensorflow" 2>/dev/null; then \
	  echo "Building Horovod 0.28.1 against TensorFlow (about 3-5 minutes on 2 cores)"; \
	  $(HVD_FLAGS) $(PIP) install -q --no-build-isolation --no-cache-dir horovod==0.28.1; fi
	@touch $@

$(STAMPS)/project: setup.py $(wildcard */__init__.py) $(STAMPS)/venv
	$(PIP) install -q --no-deps --no-build-isolation -e .
	@touch $@

unit: setup
	$(PY) -m pytest -q tests/unit

parallel: setup
	@bash tests/parallel/run_all.sh

test: setup
	$(PY) -m pytest -q tests/unit
	@bash tests/parallel/run_all.sh
	$(PY) -m pytest -q -p no:cacheprovider tests/fault

demo: setup
	@bash mpi_scripts/run_local.sh $(NP) --preset fashion_mnist_demo --grid 2x2

bench: setup
	@bash mpi_scripts/bench.sh

clean:
	rm -rf $(VENV) build *.egg-info runs
