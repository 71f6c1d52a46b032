# The two commands of the README. Both install what they need into .venv first.
.PHONY: setup repro test test-oldtf bench

setup:
	bash scripts/setup.sh

repro: setup
	. .venv/bin/activate && dvc repro

test: setup
	.venv/bin/python -m pytest -q

# The player tests again under the GPU lock's transformers (older): .venv with only the pins in which
# requirements/cpu-oldtf.txt differs installed into .venv-oldtf, which goes first on PYTHONPATH.
PLAYER_TESTS = tests/test_play.py tests/test_players.py tests/test_teacher.py
OLDTF := $(shell sed -n 's/^transformers==//p' requirements/cpu-oldtf.txt)
test-oldtf: setup
	bash scripts/setup_overlay.sh
	PYTHONPATH=.venv-oldtf .venv/bin/python -c "import transformers as t; v = t.__version__; \
		assert v == '$(OLDTF)', f'transformers {v} imported, not the overlay $(OLDTF)'; \
		print('[test-oldtf] transformers', v, 'from', t.__file__)"
	PYTHONPATH=.venv-oldtf .venv/bin/python -m pytest -q $(PLAYER_TESTS)

bench: setup
	.venv/bin/python bench/judge.py
	.venv/bin/python bench/analyze.py
	.venv/bin/python bench/play.py
	.venv/bin/python bench/train.py
