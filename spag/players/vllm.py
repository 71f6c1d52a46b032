"""The vLLM backend (optional, GPU): prefix caching and tensor parallelism from vLLM itself.

A thin adapter: render each prompt with the model's tokenizer, hand all of them to ``LLM.generate``
with one ``SamplingParams`` per prompt (its own seed), read back text and token ids. vLLM is imported
only when this backend is used; ``pip install 'spag[gpu]'`` provides it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spag.players.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    PlayerError,
    Reply,
    cut_at_next_speaker,
    per_prompt_seeds,
)


class VLLMPlayer:
    """``llm`` is a ``vllm.LLM`` (or anything with its ``generate(prompts, sampling_params)``)."""

    def __init__(self, llm, tokenizer, name: str, sampling_params: Callable | None = None):
        self.llm, self.tokenizer, self.name = llm, tokenizer, name
        self._sampling_params = sampling_params

    @classmethod
    def from_pretrained(cls, model: str, tensor_parallel_size: int = 1, dtype: str | None = None,
                        trust_remote_code: bool = False, gpu_memory_utilization: float = 0.9,
                        name: str | None = None, seed: int = 0, **options) -> VLLMPlayer:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise PlayerError("the vllm backend needs vLLM: pip install 'spag[gpu]'") from exc
        from spag.modeling import setup_special_tokens

        llm = LLM(model=str(model), tensor_parallel_size=tensor_parallel_size, dtype=dtype or "auto",
                  trust_remote_code=trust_remote_code, enable_prefix_caching=True,
                  gpu_memory_utilization=gpu_memory_utilization, seed=seed, **options)
        tokenizer = setup_special_tokens(llm.get_tokenizer())
        return cls(llm, tokenizer, name=name or str(model))

    def _params_factory(self):
        if self._sampling_params is None:
            from vllm import SamplingParams

            self._sampling_params = SamplingParams
        return self._sampling_params

    def generate(self, prompts, *, temperature: float = 1.0, top_k: int = 0, max_new_tokens: int = 256,
                 min_new_tokens: int = 1, seed=None, stop: Sequence[str] = ()) -> list[Reply]:
        from spag.game.prompts import model_input_ids

        if not prompts:
            return []
        make = self._params_factory()
        # Token ids, not text: vLLM would add a second BOS in front of a chat template's own.
        inputs = [{"prompt_token_ids": model_input_ids(self.tokenizer, p)} for p in prompts]
        params = [
            make(n=1, temperature=max(temperature, 0.0), top_k=top_k if top_k and temperature > 0 else -1,
                 max_tokens=max_new_tokens, min_tokens=min(min_new_tokens, max_new_tokens), seed=s,
                 stop=list(stop), skip_special_tokens=True)
            for s in per_prompt_seeds(seed, len(prompts))
        ]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        replies = []
        for out in outputs:
            completion = out.outputs[0]
            text, _ = cut_at_next_speaker(completion.text)
            finish = FINISH_LENGTH if getattr(completion, "finish_reason", None) == "length" else FINISH_STOP
            replies.append(Reply(text=text, n_tokens=len(completion.token_ids), finish_reason=finish))
        return replies
