"""The local lm-eval task suite (YAML + JSONL) and its generator."""
