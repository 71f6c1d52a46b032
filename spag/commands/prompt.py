"""``spag prompt``: the exact text a play model is given at each turn, for checking what it sees."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import claim_outputs, overwrite_option
from spag.config import load_settings
from spag.game.episodes import validate_episode
from spag.game.registry import make_game
from spag.harness.claims import check_distinct_paths
from spag.models.chat import to_model_input
from spag.models.loading import load_tokenizer
from spag.pipeline.context import Layout
from spag.play.engine import PlayConfig
from spag.runtime.atomic import write_jsonl_atomic
from spag.runtime.console import error, summary
from spag.runtime.errors import DataError, ParamsError
from spag.runtime.records import read_records


def prompt_records(records: list[dict], source, settings, tokenizer) -> list[dict]:
    """``{id, role, prompt}`` per game-state record ``{id, target_word, max_turns, history}``: ``prompt``
    is the text the play model tokenises next (templates or the original's prompt, then the chat template
    or plain layout the settings and ``tokenizer`` apply; a BOS token, where the model adds one, is not
    text and is not included)."""
    game = make_game(settings.game)
    out = []
    for index, record in enumerate(records):
        if isinstance(record, dict) and record.get("max_turns") is None:
            record = {**record, "max_turns": game.max_turns}
        state = validate_episode(record, index, source, game)
        rounds = type(game)(game.settings.model_copy(update={"max_turns": state["max_turns"]}))
        config = PlayConfig(rounds, settings.play)
        if config.is_over(state["target_word"], state["history"]):  # no "round 2 of 1" prompt
            raise DataError(
                source,
                index,
                f"the game is over ({len(state['history'])} utterances, "
                f"{state['max_turns']} rounds): there is no next prompt",
            )
        role = rounds.next_role(state["history"])
        text = config.prompt(role, state["target_word"], state["history"])
        out.append({"id": state.get("id", index), "role": role, "prompt": to_model_input(tokenizer, text)})
    return out


def _tokenizer(settings, model: str | None):
    """The play model's tokenizer (its chat template), or None where the prompt needs none."""
    if getattr(settings.game, "play_prompts", None) == "original":
        return None  # Adversarial Taboo's original prompt is the whole input, whatever the model
    name = model or settings.model.base
    if name == "embedded":
        base = Layout(Path.cwd()).base_model
        if not base.is_dir():
            raise DataError(
                base,
                None,
                "the embedded base model is not materialised here: run `dvc repro "
                "base_model` or name a model with --model",
            )
        name = str(base)
    return load_tokenizer(name, trust_remote_code=settings.model.trust_remote_code)


def register(app: typer.Typer) -> None:
    @app.command("prompt")
    def prompt_command(
        states: Path = typer.Argument(
            ...,
            help="Game states, JSON lines (or a JSON list): {id, target_word, "
            "max_turns, history}; the history may be empty.",
        ),
        params: Path = typer.Option(
            Path("params.yaml"), "--params", help="Params file (game settings, model)."
        ),
        output: Path = typer.Option(..., "-o", "--output", help="JSON lines out: {id, role, prompt}."),
        model: str | None = typer.Option(
            None,
            "--model",
            help="Model or tokenizer directory whose chat "
            "template renders the prompt (default: "
            "model.base of the params file).",
        ),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """Write the prompt the play model gets next in each game state (role and exact text)."""
        try:
            settings = load_settings(params)
        except ParamsError as exc:
            error(str(exc))
            raise typer.Exit(2) from None
        check_distinct_paths({"STATES": states, "--params": params}, {"-o": output})
        claim_outputs({"-o": output}, overwrite=overwrite)
        records = read_records(states)
        if not records:
            raise DataError(states, None, "holds no game states")
        written = write_jsonl_atomic(
            output,
            prompt_records(records, states, settings, _tokenizer(settings, model)),
        )
        summary("prompt", f"{written} prompts of {settings.game.name} -> {output}")
