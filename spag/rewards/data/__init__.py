"""Data shipped with spag: a small general instruction set (``general_sft.jsonl``) for offline runs."""
