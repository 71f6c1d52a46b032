# The two commands of the README. Both install what they need into .venv first.
.PHONY: setup repro test test-oldtf bench

setup:
	bash scripts/setup.sh

repro: setup
	. .venv/bin/activate && dvc repro

test: setup
	.venv/bin/python -m pytest -q

# The player tests again under the GPU lock's transformers (older), in a second CPU venv.
PLAYER_TESTS = tests/test_play.py tests/test_players.py tests/test_teacher.py
test-oldtf:
	VENV=.venv-oldtf LOCK=requirements/cpu-oldtf.txt bash scripts/setup.sh
	.venv-oldtf/bin/python -m pytest -q $(PLAYER_TESTS)

bench: setup
	.venv/bin/python bench/judge.py
	.venv/bin/python bench/analyze.py
	.venv/bin/python bench/play.py
	.venv/bin/python bench/train.py
