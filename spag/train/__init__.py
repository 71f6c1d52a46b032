"""Trainers: imitation learning (SFT with a KL term), SPAG offline policy optimisation, and online
self-play on TRL.

- :mod:`spag.train.losses`     the objectives, pure tensor functions
- :mod:`spag.train.data`       rows (:mod:`spag.rewards.rows`) -> token ids (prompt cut from the left) -> left-padded batches
- :mod:`spag.train.reference`  reference log-probs, computed once and cached beside the data
- :mod:`spag.train.trainer`    the HF Trainer subclass: its loss, its reference model, its logged statistics
- :mod:`spag.train.job`        one training job around it, :func:`run_training`: data, reference pass, build, train, save
- :mod:`spag.harness.callbacks`  the Trainer's callbacks: checkpoint modes, dvclive's curves, the progress bar
- :mod:`spag.harness.launch`     a run under torchrun / accelerate launch, its settings passed as a file
- :mod:`spag.train.online`     online self-play (``spag.method: online``) on TRL's GRPOTrainer

May import play and rewards (the games an online epoch plays, the rows it reads), config, game, players,
models, schema and runtime.
"""
