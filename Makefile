# The two commands of the README. Both install what they need into .venv first.
.PHONY: setup repro test bench dvc.yaml

setup:
	bash scripts/setup.sh

repro: setup
	. .venv/bin/activate && dvc repro

# Two workers (tests/conftest.py says how the tests are shared between them).
test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25

bench: setup
	.venv/bin/python bench/judge.py
	.venv/bin/python bench/analyze.py
	.venv/bin/python bench/play.py
	.venv/bin/python bench/train.py
	.venv/bin/python bench/reward.py
	.venv/bin/python bench/benchmark.py

# dvc.yaml is written from the stage table in spag/pipeline/table.py (and the spag/ code each stage runs).
dvc.yaml:
	.venv/bin/python -m spag.pipeline.dvcyaml
