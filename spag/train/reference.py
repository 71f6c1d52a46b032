"""Reference log-probabilities: computed once before training, cached beside the data.

Both trainers compare the policy with a frozen reference model (the base model for imitation learning,
the previous checkpoint for SPAG). Its log-likelihood of each row never changes during training, so it is
computed in one pass before training (eval mode, no gradient, rows sorted by length to waste little
padding), stored, and training then holds a single model in memory.

The cache file is keyed by

- the exact token sequences and completion boundaries of the rows (:meth:`EncodedRows.fingerprint`), which
  covers the data's content, the tokenizer, the chat template, ``max_length`` and the truncation: the
  reference sees exactly what training sees;
- the reference model's content: a hash of every file of its directory
  (:func:`spag.runtime.fingerprint.model_fingerprint`), so a model retrained at the same path misses the cache;
- the numeric setting of the pass (dtype and autocast; on a CPU in float32 the linear layers take oneDNN's
  product over packed weights, :func:`spag.players.hf.linear.weight_first`).

A change of any of them gives a different file name, so a stale cache is never read. Weights and rewards
are not part of the key: they do not change what the reference model says about a row.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
from pathlib import Path

import numpy as np

from spag.models.batching import length_groups, shared_prefix_length
from spag.players.hf.linear import packed_linears
from spag.runtime.atomic import atomic_path
from spag.runtime.console import progress
from spag.runtime.errors import DataError
from spag.runtime.fingerprint import model_fingerprint
from spag.train.data import RowDataset, collate
from spag.train.losses import completion_logprobs

CACHE_VERSION = 3  # 2: the reference model keyed by a hash of all its files; 3: oneDNN's products on a CPU


def cache_key(tokens_fingerprint: str, ref_fingerprint: str, precision: str) -> str:
    payload = json.dumps(
        {
            "version": CACHE_VERSION,
            "tokens": tokens_fingerprint,
            "ref": ref_fingerprint,
            "precision": precision,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def cache_path(data: str | os.PathLike, key: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """``<data>.ref-<key>.parquet`` beside the data (beside a shard directory, never inside it)."""
    data = Path(data)
    folder = Path(cache_dir) if cache_dir is not None else data.parent
    return folder / f"{data.name}.ref-{key[:16]}.parquet"


def read_cache(path: Path, key: str, num_rows: int) -> list[float] | None:
    """The cached log-probs, or None when the file is missing or does not match (then recompute)."""
    if not path.exists():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):  # unreadable or half-written: recompute
        return None
    meta = table.schema.metadata or {}
    if meta.get(b"spag_ref_key", b"").decode() != key or table.num_rows != num_rows:
        return None
    return table.column("ref_logprob").to_pylist()


def write_cache(path: Path, key: str, logprobs: list[float], info: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"row": pa.array(range(len(logprobs)), pa.int64()), "ref_logprob": pa.array(logprobs, pa.float64())}
    )
    metadata = {b"spag_ref_key": key.encode(), b"spag_ref_info": json.dumps(info).encode()}
    table = table.replace_schema_metadata(metadata)
    with atomic_path(path) as tmp:  # spag's own cache
        pq.write_table(table, tmp)


def _accepts(model, argument: str) -> bool:
    try:
        return argument in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def model_forward_logprobs(
    model,
    batch: dict,
    supports_logits_to_keep: bool | None = None,
    *,
    unpadded: bool = False,
    shared_prefix: bool = False,
):
    """log π of each row of a collated batch (the one forward used by training and the reference pass).

    ``unpadded``: the batch's padding is not computed: the rows run in groups of similar length
    (:func:`spag.models.batching.length_groups`), each group cut to its own width. With ``shared_prefix``
    too (batches of rows whose prompts begin alike, ``group_by_prompt``), the beginning that all the rows
    share is encoded once and its keys and values serve every row (:func:`batch_shared_prefix`). The same
    numbers up to float rounding, and one graph for the backward pass: the shared beginning's gradient is
    the sum of what each row sends it. For a single process on a CPU, where a position costs the same
    whether it is padding, a repeat or new: under DDP or DeepSpeed one forward call per step is what their
    hooks expect.

    A batch collated ``padding_free`` (:func:`spag.train.data.pack_rows`) runs as its one packed sequence
    instead, whatever the other two say."""
    import torch

    if supports_logits_to_keep is None:
        supports_logits_to_keep = _accepts(model, "logits_to_keep")
    if "packed_ids" in batch:
        return _packed_logprobs(model, batch, supports_logits_to_keep)
    if not unpadded:  # one call on the padded batch, nothing read back to the host (a GPU's way)
        return _group_logprobs(model, batch, supports_logits_to_keep)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    # Recomputed activations (gradient checkpointing) turn the keys-and-values cache off: no shared beginning.
    reuse = (
        shared_prefix and supports_logits_to_keep and not getattr(model, "is_gradient_checkpointing", False)
    )
    shared = batch_shared_prefix(batch, lengths) if reuse else 0
    if shared:
        return _shared_prefix_logprobs(model, batch, lengths, shared)
    groups = length_groups(lengths)
    if len(groups) == 1:
        return _group_logprobs(model, batch, supports_logits_to_keep)
    width = batch["input_ids"].shape[1]
    parts, order = [], []
    for rows in groups:
        index = torch.tensor(rows, device=batch["input_ids"].device)
        columns = slice(width - max(lengths[r] for r in rows), width)  # left padding: real tokens at the end
        group = {
            key: batch[key][index, columns]
            for key in ("input_ids", "attention_mask", "position_ids", "completion_mask")
        }
        group["logits_to_keep"] = min(
            group["input_ids"].shape[1], int(group["completion_mask"].sum(dim=1).max()) + 1
        )
        parts.append(_group_logprobs(model, group, supports_logits_to_keep))
        order += rows
    logp = torch.cat(parts)
    return logp[torch.argsort(torch.tensor(order, device=logp.device))]


def batch_shared_prefix(batch: dict, lengths: list[int]) -> int:
    """How many first tokens every row of a left-padded batch shares, stopping before the last prompt token
    of its shortest prompt (which runs with its row, to predict the first completion token); 0 for a batch
    of one row or a shared beginning shorter than :data:`MIN_SHARED_PREFIX`."""
    width = batch["input_ids"].shape[1]
    completions = batch["completion_mask"].sum(dim=1).tolist()
    prompts = [
        batch["input_ids"][row, width - n : width - c].tolist()
        for row, (n, c) in enumerate(zip(lengths, completions, strict=True))
    ]
    shared = shared_prefix_length(prompts)
    return shared if shared >= MIN_SHARED_PREFIX else 0


def _shared_prefix_logprobs(model, batch: dict, lengths: list[int], shared: int):
    """:func:`model_forward_logprobs` for a batch whose rows share their first ``shared`` tokens."""
    import torch
    from transformers import DynamicCache

    ids = batch["input_ids"]
    device, width = ids.device, ids.shape[1]
    start = width - lengths[0]
    prefix = model(
        input_ids=ids[:1, start : start + shared],
        position_ids=torch.arange(shared, device=device)[None],
        use_cache=True,
        logits_to_keep=1,
    ).past_key_values
    kept = [(layer.keys, layer.values) for layer in prefix.layers]
    rests = [n - shared for n in lengths]
    parts, order = [], []
    for rows in length_groups(rests):
        index = torch.tensor(rows, device=device)
        columns = max(rests[r] for r in rows)
        # A row shorter than the group's widest leaves columns of its own shared tokens (or its padding)
        # on its left: already in the cache, so masked out here.
        own = torch.tensor([[c >= columns - rests[r] for c in range(columns)] for r in rows], device=device)
        mask = torch.cat(
            [
                torch.ones(len(rows), shared, dtype=batch["attention_mask"].dtype, device=device),
                own.to(batch["attention_mask"].dtype),
            ],
            dim=1,
        )
        positions = torch.stack(
            [torch.arange(shared + rests[r] - columns, shared + rests[r], device=device) for r in rows]
        ).clamp(min=0)
        cache = DynamicCache()
        for layer, (keys, values) in enumerate(kept):
            cache.update(keys.expand(len(rows), -1, -1, -1), values.expand(len(rows), -1, -1, -1), layer)
        completion = batch["completion_mask"][index, width - columns :]
        keep = min(columns, int(completion.sum(dim=1).max()) + 1)
        logits = model(
            input_ids=ids[index, width - columns :],
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
        ).logits
        parts.append(completion_logprobs(logits, ids[index, width - columns :], completion))
        order += rows
    logp = torch.cat(parts)
    return logp[torch.argsort(torch.tensor(order, device=logp.device))]


def _packed_logprobs(model, batch: dict, supports_logits_to_keep: bool):
    """:func:`model_forward_logprobs` of a batch's packed rows: one sequence, no attention mask (transformers
    reads where each row starts from the positions), logits only where a completion token is predicted
    (``logits_to_keep`` as indices), each row's mean log-probability from its tokens'."""
    import torch
    import torch.nn.functional as F

    keep = batch["packed_keep"]
    kwargs = {"logits_to_keep": keep} if supports_logits_to_keep else {}
    logits = model(
        input_ids=batch["packed_ids"], position_ids=batch["packed_positions"], use_cache=False, **kwargs
    ).logits[0]
    if not supports_logits_to_keep:
        logits = logits[keep]
    targets = batch["packed_ids"][0, keep + 1]
    token_logprobs = -F.cross_entropy(logits.float(), targets, reduction="none")
    counts = batch["packed_counts"]
    sums = torch.zeros(counts.shape[0], dtype=token_logprobs.dtype, device=token_logprobs.device)
    return sums.index_add(0, batch["packed_rows"], token_logprobs) / counts.clamp(min=1).to(sums.dtype)


def _group_logprobs(model, batch: dict, supports_logits_to_keep: bool):
    kwargs = {"logits_to_keep": batch["logits_to_keep"]} if supports_logits_to_keep else {}
    outputs = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
        **kwargs,
    )
    return completion_logprobs(outputs.logits, batch["input_ids"], batch["completion_mask"])


def compute_reference_logprobs(
    model,
    encoded,
    pad_token_id: int,
    batch_size: int = 8,
    device=None,
    autocast_dtype=None,
    indices=None,
    show_progress: bool = True,
) -> dict[int, float]:
    """log π_ref of the rows ``indices`` (all by default), without gradient.

    On a GPU the rows go in padded batches, longest first (the largest batch comes first, so an
    out-of-memory shows up at once). On a CPU they go one at a time in the order of their tokens, each
    reusing what it shares with the row before (:func:`reused_prefix_logprobs`): about half the tokens of
    a game's rows are the rules and history of rows before them."""
    import torch

    dataset = RowDataset(encoded)
    if indices is None:
        indices = range(len(dataset))
    device = torch.device(device) if device is not None else next(model.parameters()).device
    on_cpu = device.type == "cpu"
    if on_cpu:
        order = sorted(indices, key=lambda i: list(encoded.input_ids[i]))
    else:
        order = sorted(indices, key=lambda i: len(encoded.input_ids[i]), reverse=True)
    was_training = model.training
    model.eval()
    supports = _accepts(model, "logits_to_keep")
    results: dict[int, float] = {}
    bar = progress(total=len(order), desc="reference log-probs", unit="row", disable=not show_progress)
    autocast = (
        torch.autocast(device_type=device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    linears = packed_linears(model) if autocast_dtype is None else contextlib.nullcontext()
    with torch.no_grad(), autocast, linears:
        if on_cpu and supports:
            for i, logp in zip(
                order, reused_prefix_logprobs(model, [dataset[i] for i in order]), strict=True
            ):
                results[i] = float(logp)
                bar.update(1)
        else:
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = collate([dataset[i] for i in chunk], pad_token_id)
                batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
                logp = model_forward_logprobs(model, batch, supports, unpadded=on_cpu)
                results.update(zip(chunk, logp.float().cpu().tolist()))
                bar.update(len(chunk))
    bar.close()
    model.train(was_training)
    return results


MIN_SHARED_PREFIX = 16  # tokens: a shorter shared beginning is encoded again rather than copied


def reused_prefix_logprobs(model, items: list):
    """log π of each row (dataset items, without gradient), one row at a time in the order given: a row
    takes the keys and values of the beginning it shares with the row before (rows sorted by their tokens
    share their rules and their game's history) and encodes only the rest. Yields one float tensor per row;
    the padded batch's numbers up to float rounding."""
    import torch
    from transformers import DynamicCache

    device = next(model.parameters()).device
    kept_ids: list[int] = []
    kept_kv: list = []
    for item in items:
        ids, completion = list(item["input_ids"]), item["completion_length"]
        limit = min(len(ids) - completion - 1, len(kept_ids))  # the last prompt token always runs
        shared = next((k for k in range(limit) if ids[k] != kept_ids[k]), limit)
        shared = shared if shared >= MIN_SHARED_PREFIX else 0
        cache = DynamicCache()
        for index, (keys, values) in enumerate(kept_kv if shared else []):
            cache.update(keys[:, :, :shared], values[:, :, :shared], index)
        tokens = torch.tensor([ids[shared:]], dtype=torch.long, device=device)
        logits = model(
            input_ids=tokens,
            position_ids=torch.arange(shared, len(ids), device=device)[None],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=completion + 1,
        ).logits
        mask = torch.zeros_like(tokens)
        mask[0, -completion:] = 1
        yield completion_logprobs(logits, tokens, mask)[0].float()
        kept_ids, kept_kv = ids, [(layer.keys, layer.values) for layer in cache.layers]


@contextlib.contextmanager
def _without_zero3_init():
    """Load the reference as a whole model even when a ZeRO-3 config is active for the policy."""
    from transformers.integrations import deepspeed as hf_ds

    ref = hf_ds._hf_deepspeed_config_weak_ref
    hf_ds._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = ref


def load_reference_model(name_or_path, device, trust_remote_code: bool = False):
    """The frozen reference model in float32 eval mode on ``device``, never partitioned by ZeRO-3."""
    import torch
    from transformers import AutoModelForCausalLM

    with _without_zero3_init():
        model = AutoModelForCausalLM.from_pretrained(
            str(name_or_path), dtype=torch.float32, trust_remote_code=trust_remote_code
        )
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def reference_logprobs(
    data: str | os.PathLike,
    encoded,
    ref: str | os.PathLike,
    pad_token_id: int,
    batch_size: int = 8,
    cache_dir: str | os.PathLike | None = None,
    autocast_dtype=None,
    trust_remote_code: bool = False,
    state=None,
    show_progress: bool = True,
) -> tuple[list[float], Path, bool]:
    """Reference log-probs of every row: from the cache when it matches, else computed and cached.

    Returns ``(logprobs, cache_file, reused)``. With several processes (``state``, an accelerate
    PartialState) each computes a share of the rows; the main process writes the cache.
    """
    import torch

    precision = f"float32+autocast:{autocast_dtype}" if autocast_dtype is not None else "float32"
    key = cache_key(encoded.fingerprint(), model_fingerprint(ref), precision)
    path = cache_path(data, key, cache_dir)
    cached = read_cache(path, key, len(encoded))
    if cached is not None:
        return cached, path, True
    stale = [p for p in path.parent.glob(f"{Path(data).name}.ref-*.parquet") if p != path]
    if stale and (state is None or getattr(state, "process_index", 0) == 0):
        print(
            f"note: reference log-probs cached in {stale[0].parent} are for other rows, another reference "
            f"model or precision; computing them for {ref}"
        )

    num_processes = getattr(state, "num_processes", 1) if state is not None else 1
    rank = getattr(state, "process_index", 0) if state is not None else 0
    device = state.device if state is not None else torch.device("cpu")
    model = load_reference_model(ref, device, trust_remote_code=trust_remote_code)
    mine = range(rank, len(encoded), num_processes)
    results = compute_reference_logprobs(
        model,
        encoded,
        pad_token_id,
        batch_size=batch_size,
        device=device,
        autocast_dtype=autocast_dtype,
        indices=mine,
        show_progress=show_progress and rank == 0,
    )
    del model
    if num_processes > 1:
        import torch.distributed as dist

        gathered: list = [None] * num_processes
        dist.all_gather_object(gathered, results)
        results = {i: v for part in gathered for i, v in part.items()}
    logprobs = [results[i] for i in range(len(encoded))]
    bad = [i for i, v in enumerate(logprobs) if not np.isfinite(v)]
    if bad:
        raise DataError(data, bad[0], f"reference log-prob is not finite ({logprobs[bad[0]]})")
    if rank == 0:
        info = {"ref": str(ref), "precision": precision, "rows": len(encoded)}
        write_cache(path, key, logprobs, info)
    if num_processes > 1:
        state.wait_for_everyone()
    return logprobs, path, False
