"""Trainers: imitation learning (SFT with a KL term) and SPAG offline policy optimisation.

- :mod:`spag.train.losses`     the objectives, pure tensor functions
- :mod:`spag.train.data`       rows (:mod:`spag.rows`) -> token ids (prompt cut from the left) -> left-padded batches
- :mod:`spag.train.reference`  reference log-probs, computed once and cached beside the data
- :mod:`spag.train.trainer`    the HF Trainer subclass and :func:`run_training`
- :mod:`spag.train.launch`     a run under torchrun / accelerate launch, its settings passed as a file
"""
