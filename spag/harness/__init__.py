"""The harness: what runs around the core (games, players, play, rewards, training, evaluation) and is not
part of the method. The core takes typed arguments and writes through :mod:`spag.runtime.atomic`; the
harness decides which outputs a command may write, keeps the record of what spag wrote, and owns the
process.

- :mod:`spag.harness.rule`       the output rule: what a write may replace, claimed before any work
- :mod:`spag.harness.manifest`   what spag wrote in a folder (inode, size, mtime per entry)
- :mod:`spag.harness.folders`    folders that are a command's output: claimed, cleared, published
- :mod:`spag.harness.locks`      one writer per output (filelock)
- :mod:`spag.harness.claims`     a command's claim on its outputs before any work
- :mod:`spag.harness.partial`    work beside a DVC output, renamed onto it when finished
- :mod:`spag.harness.process`    a process spag owns: its garbage collector, its end, its torch.distributed group
- :mod:`spag.harness.allocator`  the C library's allocator of a process spag owns: freed memory kept for reuse
- :mod:`spag.harness.callbacks`  the Trainer's experiment tracking: dvclive's curves, checkpoint modes, the progress bar
- :mod:`spag.harness.launch`     a training run under torchrun / accelerate launch, its settings passed as a file
- :mod:`spag.harness.zero`       ZeRO only where it pays: DeepSpeed left out of one process that plain training fits
- :mod:`spag.harness.environment` the process around a DeepSpeed run: ninja on PATH, py-cpuinfo, gloo on a CPU

Above the core and below the entry points (:mod:`spag.commands`, :mod:`spag.pipeline`): the layers are
listed once, in pyproject.toml's import-linter contract.
"""
