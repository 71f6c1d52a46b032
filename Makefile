# The two commands of the README. Both install what they need into .venv first.
.PHONY: setup repro test bench

setup:
	bash scripts/setup.sh

repro: setup
	. .venv/bin/activate && dvc repro

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/python bench/judge.py
	.venv/bin/python bench/analyze.py
	.venv/bin/python bench/play.py
	.venv/bin/python bench/train.py
	.venv/bin/python bench/reward.py
	.venv/bin/python bench/benchmark.py
