"""Any OpenAI-compatible endpoint as a player: GPT-4 as the teacher, or a model behind ``vllm serve``.

Requests run in a bounded pool of threads. The OpenAI client retries a request that fails for a reason
worth retrying (a 408, 409, 429 or 5xx answer, a timeout, a dropped connection) with its own exponential
backoff, honouring the server's Retry-After; one that keeps failing raises :class:`PlayerError` naming
the endpoint and the last reason.

The API key is read from the environment and never written out, and it goes only where the user sent
it: ``OPENAI_API_KEY`` only to OpenAI's own API (no ``base_url``, or one on ``api.openai.com``); any other
endpoint gets a key only from a variable the user named for it (``api_key_env``, ``--api-key-env NAME``),
so a local vLLM server, or a mistyped URL, never sees the OpenAI key. A plain ``http://`` URL to a host
that is not this machine gets a warning: prompts (and a key) would cross the network unencrypted.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from spag.models.chat import to_model_input
from spag.players.base import FINISH_LENGTH, FINISH_STOP, Reply, cut_at, per_prompt_seeds
from spag.players.options import OpenAIOptions
from spag.runtime.errors import PlayerError
from spag.schema import shown_url

_OPENAI_STOP_LIMIT = 4  # the OpenAI API takes at most four stop strings
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
OPENAI_HOST = "api.openai.com"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key_for(base_url: str | None, api_key_env: str | None) -> str | None:
    """The key to send to ``base_url``: from ``api_key_env`` when the user named one, else
    ``OPENAI_API_KEY`` for OpenAI's own host only; None means no key for this endpoint."""
    if api_key_env:
        return os.environ.get(api_key_env) or None
    host = urlsplit(base_url).hostname if base_url else OPENAI_HOST
    return os.environ.get(DEFAULT_KEY_ENV) or None if host == OPENAI_HOST else None


def check_transport(base_url: str | None) -> None:
    """Warn about a plain-http endpoint on another machine."""
    if not base_url:
        return
    parts = urlsplit(base_url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        print(
            f"warning: {shown_url(base_url)} is plain http to another host: prompts and any API key cross the "
            "network unencrypted (use https)",
            file=sys.stderr,
            flush=True,
        )


class OpenAIPlayer:
    """A model behind ``/v1/chat/completions`` (``api="chat"``) or ``/v1/completions``.

    ``extensions`` sends ``top_k`` and ``min_tokens``, which vLLM and most compatible servers accept but
    the OpenAI API rejects; it defaults to on for any ``base_url`` and off for OpenAI itself.
    """

    def __init__(self, model: str, options: OpenAIOptions | None = None, *, name: str | None = None):
        options = options or OpenAIOptions()
        try:
            import openai
        except ImportError as exc:
            raise PlayerError("the openai backend needs the openai package: pip install 'spag[api]'") from exc
        base_url, api_key_env = options.base_url, options.api_key_env
        check_transport(base_url)
        api_key = api_key_for(base_url, api_key_env)
        if not api_key:
            if base_url is None:
                raise PlayerError(
                    f"no API key: set the environment variable {api_key_env or DEFAULT_KEY_ENV}"
                )
            api_key = "not-needed"  # local servers usually ignore the key, but the client wants one
        self.model = model
        self.name = name or model
        self.base_url = shown_url(base_url or "https://api.openai.com/v1")  # what messages show
        self.api = options.api
        self.concurrency = options.concurrency
        self.max_retries = options.max_retries
        self.extensions = base_url is not None if options.extensions is None else options.extensions
        self._errors = openai
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, timeout=options.timeout, max_retries=self.max_retries
        )

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
        if not prompts:
            return []
        seeds = per_prompt_seeds(seed, len(prompts))
        settings = dict(
            temperature=temperature,
            top_k=top_k,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            stop=list(stop)[:_OPENAI_STOP_LIMIT],
            stop_pattern=stop_pattern,
        )
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            futures = [pool.submit(self._call, p, s, settings) for p, s in zip(prompts, seeds)]
            return [f.result() for f in futures]

    # ---------------------------------------------------------------------------------------- one call

    def _call(self, prompt: str, seed: int | None, settings: dict) -> Reply:
        """One request (the client retries it); its failure as a one-line PlayerError."""
        errors = self._errors
        try:
            return self._request(prompt, seed, **settings)
        except errors.APIStatusError as exc:
            reason = f"HTTP {exc.status_code}"
            if exc.status_code < 500 and exc.status_code not in (
                408,
                409,
                429,
            ):  # the client does not retry these
                raise PlayerError(f"{self.base_url}: request rejected ({reason}: {_short(exc)})") from exc
        except errors.APITimeoutError:
            reason = "timed out"
        except errors.APIConnectionError as exc:
            reason = f"connection failed ({_short(exc)})"
        raise PlayerError(
            f"{self.base_url}: request failed after {self.max_retries + 1} attempts (last: {reason})"
        )

    def _request(
        self,
        prompt: str,
        seed: int | None,
        *,
        temperature,
        top_k,
        max_new_tokens,
        min_new_tokens,
        stop,
        stop_pattern,
    ) -> Reply:
        kwargs = dict(model=self.model, max_tokens=max_new_tokens, temperature=max(temperature, 0.0))
        if seed is not None:
            kwargs["seed"] = seed
        if stop:
            kwargs["stop"] = stop
        if self.extensions:
            extra = {"min_tokens": min(min_new_tokens, max_new_tokens)}
            if top_k and temperature > 0:
                extra["top_k"] = top_k
            kwargs["extra_body"] = extra
        if self.api == "chat":
            response = self._client.chat.completions.create(
                messages=[{"role": "user", "content": prompt}], **kwargs
            )
            choice = response.choices[0]
            text = choice.message.content or ""
        else:
            response = self._client.completions.create(prompt=to_model_input(None, prompt), **kwargs)
            choice = response.choices[0]
            text = choice.text or ""
        usage = getattr(response, "usage", None)
        n_tokens = (
            usage.completion_tokens if usage is not None and usage.completion_tokens else len(text.split())
        )
        text, _ = cut_at(text, stop_pattern)
        finish = FINISH_LENGTH if choice.finish_reason == "length" else FINISH_STOP
        return Reply(text=text, n_tokens=int(n_tokens), finish_reason=finish)


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text[:200]
