"""Effects over several training seeds: runs of one arm pooled, and two arms paired seed by seed.

Each run is a pipeline project (its ``metrics/`` folder) trained with its own ``seed`` and evaluated on
the same words and sampling seeds (``evaluate.*`` fixed). Every effect is a table ``[run, word]`` of a
per-word difference, summarised by :func:`spag.runtime.statistics.two_way_mean`: the mean over runs and
words, with a bootstrap that resamples runs and words together, so the interval covers both the training
seed's and the evaluation words' variation.

Effects of one arm, at one epoch:

- ``score_vs_imitation``: the mean game score against the imitation model (0.5: no better);
- ``minus_strongest_baseline``: the score minus the score of the no-training baseline that is strongest
  over all the runs (both against the imitation model, paired per word);
- ``clue_rank``, ``guess_rank``, ``opening_foul_rate``: the skill metric minus the imitation model's
  (lower is better), paired per word;
- per role, from the evaluation games: ``attacker/score`` and ``defender/score``, and the share of the
  role's games that ended each way (``attacker/win_induced_word``, ``defender/win_correct_guess``, ...:
  :data:`spag.evaluate.games.DECOMPOSITION`).

With a second arm (``against``, its runs in the same seed order), each effect's difference A − B, paired
per seed and word.

Each run is one seed: a folder named twice (in one arm or both) is refused, and so is a metrics file whose
per-word ``[sum, count]`` is not two finite numbers, a whole count, and for game scores 0 to the count.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from spag.evaluate.games import per_word_by_role
from spag.game.registry import episode_game
from spag.runtime.errors import DataError
from spag.runtime.statistics import two_way_mean

PerWord = Mapping[str, Sequence[float]]  # word -> [sum, count]


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, None, "missing: has this run finished its evaluation?") from None
    except IsADirectoryError:
        raise DataError(path, None, "is a directory, expected a JSON file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(path, None, f"not JSON ({getattr(error, 'msg', error)})") from None
    if not isinstance(data, dict):
        raise DataError(path, None, f"expected a JSON object, got {type(data).__name__}")
    return data


def _section(data: dict, key: str, path: Path) -> dict:
    """``data[key]``, an object (absent: empty); anything else is an error naming the key."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise DataError(path, None, f"{key} is {type(value).__name__}, expected an object")
    return value


def _check_run(run: Path) -> None:
    """A run is an existing folder: say which path is not, before looking for its epochs."""
    if not run.exists():
        raise DataError(run, None, "no such folder (a pipeline project expected)")
    if not run.is_dir():
        raise DataError(run, None, "is a file, expected a pipeline project's folder")


def final_epoch(run: Path) -> str:
    """The last evaluated epoch of a run (the highest number under ``metrics/epochs``)."""
    epochs = [p.name for p in (run / "metrics" / "epochs").glob("*") if (p / "games.json").is_file()]
    if not epochs:
        raise DataError(run / "metrics" / "epochs", None, "no evaluated epoch")
    for name in sorted(epochs):
        if not name.isdigit():  # which is "last" is not known: the user names the epoch
            raise DataError(
                run / "metrics" / "epochs" / name,
                None,
                "not an epoch number: name the epoch to compare with --epoch",
            )
    return max(epochs, key=int)


def run_effects(run: str | os.PathLike, epoch: str | None = None) -> dict[str, dict[str, float]]:
    """Per-word values of one run at ``epoch`` (default: its last): ``score_vs_imitation`` (mean score),
    ``baseline:NAME`` (each baseline's mean score against imitation) and each skill metric minus the
    imitation model's. Each maps word -> value."""
    run = Path(run)
    _check_run(run)
    epoch = epoch or final_epoch(run)
    games_path = run / "metrics" / "epochs" / epoch / "games.json"
    games = _section(_read(games_path), "vs_imitation", games_path)
    if "per_word" not in games:
        raise DataError(games_path, None, "no per-word games against the imitation model")
    out = {"score_vs_imitation": _means(games["per_word"], games_path, "vs_imitation.per_word", scores=True)}
    out.update(_by_role(run / "data" / f"epoch_{epoch}" / "eval_episodes" / "vs_imitation"))
    for path in sorted((run / "metrics" / "baselines").glob("*.json")):
        entry = _section(_read(path), "games", path)
        if "per_word" in entry:
            out[f"baseline:{path.stem}"] = _means(entry["per_word"], path, "games.per_word", scores=True)
    skill_path = run / "metrics" / "epochs" / epoch / "skill.json"
    if skill_path.is_file():
        reference_path = run / "metrics" / "imitation" / "skill.json"
        mine = _section(_read(skill_path), "per_word", skill_path)
        reference = _section(_read(reference_path), "per_word", reference_path)
        for metric in mine:
            if metric in reference:
                a = _means(mine[metric], skill_path, f"per_word.{metric}")
                b = _means(reference[metric], reference_path, f"per_word.{metric}")
                out[metric] = {w: a[w] - b[w] for w in a if w in b}
    return out


def _by_role(folder: Path) -> dict[str, dict[str, float]]:
    """Per-word score and outcome shares of each role, from the evaluation games (absent: nothing)."""
    import polars as pl

    found = sorted(folder.glob("as_*.parquet"))
    if not found:
        return {}
    game = episode_game(pl.read_parquet(found[0], n_rows=1).to_dicts()[0])
    files = [folder / f"as_{role}.parquet" for role in game.roles]
    if not all(f.is_file() for f in files):
        return {}
    first, second = (pl.read_parquet(f).to_dicts() for f in files)
    return {name: _means(values) for name, values in per_word_by_role(game, first, second).items()}


def _means(
    per_word: PerWord, source: Path | str = "", key: str = "per_word", scores: bool = False
) -> dict[str, float]:
    """Each word's mean ``sum / count`` (words with no count left out). ``per_word`` is read from
    ``source`` (at ``key``): every entry must be ``[sum, count]``, finite, the count a whole number >= 0,
    and with ``scores`` (a game scores 0 to 1) the sum between 0 and the count; else a DataError naming the
    word."""
    if not isinstance(per_word, Mapping):
        raise DataError(
            source, None, f"{key} is {type(per_word).__name__}, expected an object word -> [sum, count]"
        )
    out = {}
    for word, entry in per_word.items():
        where = f"{key}[{word!r}] = {json.dumps(entry)}"
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in entry)
        ):
            raise DataError(source, None, f"{where}: expected [sum, count], two numbers")
        total, count = float(entry[0]), float(entry[1])
        if not (math.isfinite(total) and math.isfinite(count)):
            raise DataError(source, None, f"{where}: not a finite number")
        if count < 0 or not count.is_integer():
            raise DataError(source, None, f"{where}: the count must be a whole number, 0 or more")
        if scores and not 0 <= total <= count:
            raise DataError(
                source, None, f"{where}: {total:g} points in {count:g} games (a game scores 0 to 1)"
            )
        if count:
            out[word] = total / count
    return out


def _table(runs: Sequence[Mapping[str, float]], names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """``[run, word]`` over the words every run has; an error names a run whose words differ."""
    words = sorted(runs[0])
    for values, name in zip(runs[1:], names[1:]):
        if set(values) != set(words):
            raise DataError(
                name,
                None,
                f"evaluated on other words than {names[0]} ({len(set(values) ^ set(words))} "
                "differ): runs are compared on the same evaluation words (evaluate.*)",
            )
    return np.array([[values[w] for w in words] for values in runs]), words


def _strongest(runs: Sequence[Mapping[str, dict]]) -> str | None:
    shared = set.intersection(*({k for k in r if k.startswith("baseline:")} for r in runs))
    if not shared:
        return None
    return max(sorted(shared), key=lambda k: np.mean([np.mean(list(r[k].values())) for r in runs]))


def arm_effects(runs: Sequence[Mapping[str, dict]], names: Sequence[str], seed: int = 0) -> dict:
    """The effects of one arm over its runs (see the module docstring), each a :func:`two_way_mean` entry."""
    out = {}
    table, _ = _table([r["score_vs_imitation"] for r in runs], names)
    out["score_vs_imitation"] = two_way_mean(table, seed=seed)
    strongest = _strongest(runs)
    if strongest:
        base, _ = _table([r[strongest] for r in runs], names)
        out["minus_strongest_baseline"] = {
            **two_way_mean(table - base, seed=seed),
            "baseline": strongest.split(":", 1)[1],
            "baseline_score": two_way_mean(base, seed=seed)["value"],
        }
    for key in (*_skill_keys(runs), *_role_keys(runs)):
        if all(key in r for r in runs):
            out[key] = two_way_mean(_table([r[key] for r in runs], names)[0], seed=seed)
    return out


def _skill_keys(runs: Sequence[Mapping[str, dict]]) -> list[str]:
    """The skill metrics every run has (its game's: Adversarial Taboo's clue rank, guess rank, opening foul
    rate), in the order the first run has them."""
    return [
        k
        for k in runs[0]
        if k != "score_vs_imitation"
        and not k.startswith("baseline:")
        and "/" not in k
        and all(k in r for r in runs)
    ]


def _role_keys(runs: Sequence[Mapping[str, dict]]) -> list[str]:
    """``ROLE/score`` and ``ROLE/PART`` keys every run has, in the order the first run has them."""
    return [k for k in runs[0] if "/" in k and all(k in r for r in runs)]


def paired_arms(
    a: Sequence[Mapping[str, dict]],
    b: Sequence[Mapping[str, dict]],
    names_a: Sequence[str],
    names_b: Sequence[str],
    seed: int = 0,
) -> dict:
    """A − B per effect, run i of A paired with run i of B (same training seed) and per word."""
    if len(a) != len(b):
        raise DataError(
            names_b[0] if names_b else "--against",
            None,
            f"{len(b)} runs to pair with {len(a)}: give one run per seed, in the same order",
        )
    out = {}
    for key in ("score_vs_imitation", *_skill_keys([*a, *b]), *_role_keys([*a, *b])):
        if all(key in r for r in (*a, *b)):
            ta, _ = _table([r[key] for r in a] + [r[key] for r in b], [*names_a, *names_b])
            out[key] = two_way_mean(ta[: len(a)] - ta[len(a) :], seed=seed)
    return out


def _refuse_repeats(runs: Sequence[str | os.PathLike]) -> None:
    """Each run is one training seed: the same folder given twice (also under another spelling, a link,
    or in both arms) is an error naming both, before anything is read."""
    seen: dict[Path, str] = {}
    for run in runs:
        resolved = Path(run).resolve()
        if resolved in seen:
            same = "" if str(run) == seen[resolved] else f" (the same folder as {seen[resolved]})"
            raise DataError(run, None, f"given twice{same}: each run counts as one seed, so name each once")
        seen[resolved] = str(run)


def pool_runs(
    runs: Sequence[str | os.PathLike],
    against: Sequence[str | os.PathLike] = (),
    epoch: str | None = None,
    seed: int = 0,
) -> dict:
    """Everything above for the runs (and the paired difference to ``against`` when given)."""
    if not runs:
        raise DataError("runs", None, "no run given")
    _refuse_repeats([*runs, *against])
    names = [str(r) for r in runs]
    values = [run_effects(r, epoch) for r in runs]
    result = {"runs": names, "epoch": epoch or "last", "effects": arm_effects(values, names, seed)}
    if against:
        names_b = [str(r) for r in against]
        others = [run_effects(r, epoch) for r in against]
        result["against"] = {
            "runs": names_b,
            "effects": arm_effects(others, names_b, seed),
            "a_minus_b": paired_arms(values, others, names, names_b, seed),
        }
    return result


def format_effects(effects: Mapping[str, dict], title: str) -> str:
    """A plain-text table: effect, mean, 95% interval, per-run values."""
    lines = [title, f"{'effect':<36} {'mean':>8}  {'95% interval':<20} per run"]
    for key, e in effects.items():
        label = key + (f" ({e['baseline']})" if "baseline" in e else "")
        per_run = " ".join(f"{v:+.3f}" if key != "score_vs_imitation" else f"{v:.3f}" for v in e["per_run"])
        lines.append(f"{label:<36} {e['value']:>8.3f}  [{e['low']:.3f}, {e['high']:.3f}]{'':<4} {per_run}")
    return "\n".join(lines)
