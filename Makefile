# The two commands of the README. Both install what they need into .venv first: `make repro` what the
# default run imports (requirements/cpu-run.txt without a GPU), `make test` everything (requirements/cpu.txt).
.PHONY: setup setup-test repro test lint bench dvc.yaml

setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --test

repro: setup
	. .venv/bin/activate && dvc repro

# Two workers (tests/conftest.py says how the tests are shared between them).
test: setup-test
	.venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25

# Every module spag imports is declared in pyproject.toml (deptry); ruff's checks and its format; the layers
# (import-linter, pyproject.toml's contract).
lint: setup-test
	.venv/bin/deptry spag
	.venv/bin/ruff check spag tests scripts bench stages
	.venv/bin/ruff format --check spag tests scripts bench stages
	.venv/bin/lint-imports

bench: setup-test
	.venv/bin/python bench/judge.py
	.venv/bin/python bench/analyze.py
	.venv/bin/python bench/play.py
	.venv/bin/python bench/train.py
	.venv/bin/python bench/reward.py
	.venv/bin/python bench/benchmark.py

# dvc.yaml is written from the stage table in spag/pipeline/table.py (and the spag/ code each stage runs).
dvc.yaml:
	.venv/bin/python -m spag.pipeline.dvcyaml
