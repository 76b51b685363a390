# servebench: `make run` runs the nightly DAG end to end on the local default;
# `make test` runs the whole test suite. Everything else is a step of those two.
SHELL := /bin/bash
ROOT := $(abspath .)
PYTHON ?= python3
VENV := $(ROOT)/.venv
BIN := $(VENV)/bin
STACKS_VENV ?= $(ROOT)/.venv-stacks
VLLM_VENV ?= $(ROOT)/.venv-vllm
QUANT_VENV ?= $(ROOT)/.venv-quant
export SERVEBENCH_CACHE ?= $(HOME)/.cache/servebench
LLAMA_CPP_PYTHON_VERSION := 0.3.36
# the llama.cpp build flavour (scripts/build_llama_cpp.sh says why AMX kernels are off)
export LLAMA_CPP_BUILD_TAG := noamx
export LLAMA_CPP_PYTHON_VERSION
LLAMA_BIN := $(SERVEBENCH_CACHE)/llama.cpp-$(LLAMA_CPP_PYTHON_VERSION)-$(LLAMA_CPP_BUILD_TAG)/build/bin
MODELS := $(ROOT)/build/models
GGUFS := $(addprefix $(MODELS)/adder-3m-,f16.gguf q8_0.gguf q4_k_m.gguf q2_k.gguf)

# Airflow runs from a project-local home: SQLite, no examples, dags/ as the dags folder.
export AIRFLOW_HOME := $(ROOT)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(ROOT)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(ROOT)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN := sqlite:///$(ROOT)/.airflow/airflow.db
export AIRFLOW__CORE__UNIT_TEST_MODE := False
export SERVEBENCH_LLAMA_BIN := $(LLAMA_BIN)
export SERVEBENCH_STACKS_VENV := $(STACKS_VENV)
export STACKS_VENV
export SERVEBENCH_VLLM_VENV := $(VLLM_VENV)
export VLLM_VENV
export SERVEBENCH_QUANT_VENV := $(QUANT_VENV)
export QUANT_VENV

# `make setup`, `make run` and `make test` run their steps through scripts/steps.py: side by
# side where nothing orders them (STEP:AFTER,... waits for those), one line per step with the
# time since this make started, its progress in place on a terminal, its output in
# build/logs/STEP.log (named, with its last lines, when it fails). Each step is a target of its
# own below, for `make STEP` with its output on the terminal.
STEPS := $(PYTHON) scripts/steps.py
SETUP_STEPS := venv stacks vllm quant llama models:venv,stacks,llama
ifndef SERVEBENCH_STEPS_T0
export SERVEBENCH_STEPS_T0 := $(shell date +%s)
endif

.PHONY: run test proof airflow setup system system-test venv stacks vllm quant llama models airflow-db \
	dag unit \
	clean bench-ec2
run: system
	@$(STEPS) $(SETUP_STEPS) airflow-db:venv dag:models,vllm,quant,airflow-db
	$(BIN)/servebench summary --latest --require-ok

# the multi-night proof is left to `make proof`: on a 2-vCPU host whose speed wanders over
# minutes its simulated nights, seconds apart, fail it more often than not (docs/trends.md)
test: system-test
	@$(STEPS) $(SETUP_STEPS) airflow-db:venv
	$(BIN)/python -m pytest -m "not multinight" --durations=25

# the twenty-night local proof of the trends (docs/trends.md gives its record)
PROOF = $(BIN)/python -m pytest -m multinight tests/integration/test_multinight.py

proof: setup airflow-db
	$(PROOF)

# what a night on several ec2 targets pays for, in the ec2 tests' moto + netns harness (root)
bench-ec2: system-test setup airflow-db
	$(BIN)/python benchmarks/ec2_hosts.py $(ARGS)

# the Airflow UI on http://127.0.0.1:8080 (Browse -> Benchmarks): a local tryout on this
# project's SQLite home, every user an admin; docs/deployment.md for a
# deployment
airflow: setup airflow-db
	PATH="$(BIN):$$PATH" AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True airflow standalone

# the unit tests alone: no server, no Airflow import (the DAG tests are in `make test`)
unit: venv
	$(BIN)/python -m pytest tests/unit

setup: system
	@$(STEPS) $(SETUP_STEPS)

# the system packages a target needs: every missing one named, with the apt-get line that
# installs them, before anything is built (scripts/check_system.sh holds the list)
system:
	@scripts/check_system.sh build

system-test:
	@scripts/check_system.sh build test

venv: $(VENV)/.stamp
$(VENV)/.stamp: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar off -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

stacks:
	scripts/setup_stacks_venv.sh

# vLLM's CPU build (requirements-vllm.txt), the local default's vLLM stack
vllm: system
	scripts/setup_vllm_venv.sh

# llm-compressor (requirements-quant.txt): makes the checkpoints of the sweeps' recipe variants
quant: system
	scripts/setup_quant_venv.sh

llama: system
	scripts/build_llama_cpp.sh

# every built GGUF is launched once and sent a batch of requests: a binary/model pair that
# crashes (a signal, a bad file) fails the build here, naming the file and how it died
models: venv stacks llama
	$(STACKS_VENV)/bin/python scripts/build_local_model.py --llama-bin $(LLAMA_BIN) --out $(MODELS)
	$(STACKS_VENV)/bin/python scripts/build_local_model.py --llama-bin $(LLAMA_BIN) --out $(MODELS) \
		--checkpoint include/models/adder-300k --quants ""
	$(BIN)/servebench smoke include/sweeps/local.yaml --stack llama_cpp

airflow-db: venv
	mkdir -p $(AIRFLOW_HOME)
	$(BIN)/airflow db migrate > $(AIRFLOW_HOME)/migrate.log 2>&1 || (tail -20 $(AIRFLOW_HOME)/migrate.log; exit 1)

# the nightly DAG alone, on what `make setup` and `make airflow-db` made (`make run`'s last step)
dag:
	$(BIN)/airflow dags test nightly_benchmark

# retrain the committed checkpoint (deterministic, ~2 min on 2 cores)
train: stacks
	$(STACKS_VENV)/bin/python scripts/train_local_model.py

clean:
	rm -rf build .airflow data
