"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spag.game.taboo.replies import STOPS
from spag.players import PlayerError, load_player
from spag.players.openai import OpenAIPlayer
from spag.players.options import HFOptions, OpenAIOptions

SECRET = "sk-test-secret-value-123"


class Endpoint:
    """A scripted /v1/chat/completions and /v1/completions server.

    ``script`` is a list of steps consumed one per request: ("ok", text[, finish]), ("error", status),
    ("slow", seconds, text), ("gate", n, text): held until n requests have been in flight at once (3 s at
    most), then 0.2 s more. When it runs out, ``default`` answers (a function of the request body).
    """

    def __init__(self, script=None, default=None):
        self.script = list(script or [])
        self.default = default or (lambda body: ("ok", "fine"))
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint.lock:
                    endpoint.requests.append({"path": self.path, **body})
                    endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
                    step = endpoint.script.pop(0) if endpoint.script else endpoint.default(body)
                    endpoint.in_flight += 1
                    endpoint.max_in_flight = max(endpoint.max_in_flight, endpoint.in_flight)
                    endpoint.arrived.notify_all()
                self._counted = True
                try:
                    self._answer(step, body)
                finally:
                    self._leave()

            def _leave(self):
                """No longer in flight: before the reply goes out, so a client that sends its next request
                as soon as it has this reply is never counted beside it."""
                if self._counted:
                    with endpoint.lock:
                        endpoint.in_flight -= 1
                    self._counted = False

            def _answer(self, step, body):
                kind = step[0]
                if kind == "error":
                    self._send(step[1], {"error": {"message": "scripted failure", "type": "server_error"}})
                    return
                if kind == "slow":
                    time.sleep(step[1])
                    text, finish = step[2], "stop"
                elif kind == "gate":
                    with endpoint.arrived:
                        endpoint.arrived.wait_for(lambda: endpoint.max_in_flight >= step[1], timeout=3.0)
                    time.sleep(0.2)  # room for any request beyond n to arrive too
                    text, finish = step[2], "stop"
                else:
                    text = step[1]
                    finish = step[2] if len(step) > 2 else "stop"
                usage = {
                    "prompt_tokens": 5,
                    "completion_tokens": len(text.split()),
                    "total_tokens": 5 + len(text.split()),
                }
                if self.path.endswith("/chat/completions"):
                    choice = {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                    }
                    obj = "chat.completion"
                else:
                    choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
                    obj = "text_completion"
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": obj,
                        "created": 0,
                        "model": body["model"],
                        "choices": [choice],
                        "usage": usage,
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self._leave()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint_factory(monkeypatch):
    monkeypatch.setenv("SPAG_TEST_KEY", SECRET)
    made = []

    def make(script=None, default=None):
        made.append(Endpoint(script, default))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _player(endpoint, **options):
    options = {"api_key_env": "SPAG_TEST_KEY", "max_retries": 2, "timeout": 5.0, **options}
    return load_player("teacher", "openai", base_url=endpoint.url, **options)


def test_chat_request_and_reply(endpoint_factory):
    endpoint = endpoint_factory([("ok", "Defender: Think of a warm drink.\nAttacker: tea?")])
    player = _player(endpoint)
    (reply,) = player.generate(
        ["USER TEXT"],
        temperature=1.2,
        top_k=50,
        max_new_tokens=32,
        min_new_tokens=2,
        seed=7,
        stop=["\ndefender:", "\nattacker:"],
        stop_pattern=STOPS.pattern,
    )
    assert reply.text == "Defender: Think of a warm drink."  # cut at the invented next line (the pattern)
    assert reply.n_tokens == 8 and not reply.truncated
    request = endpoint.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["messages"] == [{"role": "user", "content": "USER TEXT"}]
    assert request["max_tokens"] == 32 and request["temperature"] == 1.2 and request["seed"] == 7
    assert request["stop"] == ["\ndefender:", "\nattacker:"]
    assert request["top_k"] == 50 and request["min_tokens"] == 2  # server extensions for a local endpoint
    assert endpoint.headers[0]["authorization"] == f"Bearer {SECRET}"


def test_completions_api_and_length_finish(endpoint_factory):
    endpoint = endpoint_factory([("ok", "a b c d", "length")])
    player = _player(endpoint, api="completions")
    (reply,) = player.generate(["USER TEXT"], temperature=0, max_new_tokens=4)
    assert endpoint.requests[0]["path"] == "/v1/completions"
    assert "USER TEXT" in endpoint.requests[0]["prompt"]
    assert "top_k" not in endpoint.requests[0]  # greedy: nothing to restrict
    assert reply.truncated and reply.text == "a b c d"


def test_server_error_then_success_is_retried(endpoint_factory):
    endpoint = endpoint_factory([("error", 500), ("ok", "second time lucky")])
    (reply,) = _player(endpoint).generate(["hi"], max_new_tokens=8)
    assert reply.text == "second time lucky"
    assert len(endpoint.requests) == 2


def test_persistent_server_error_is_a_clear_error(endpoint_factory):
    endpoint = endpoint_factory(default=lambda body: ("error", 503))
    with pytest.raises(PlayerError) as err:
        _player(endpoint, max_retries=2).generate(["hi"], max_new_tokens=8)
    message = str(err.value)
    assert "failed after 3 attempts" in message and "HTTP 503" in message and endpoint.url in message
    assert SECRET not in message
    assert len(endpoint.requests) == 3


def test_client_error_is_not_retried(endpoint_factory):
    endpoint = endpoint_factory(default=lambda body: ("error", 400))
    with pytest.raises(PlayerError, match="rejected.*HTTP 400"):
        _player(endpoint).generate(["hi"], max_new_tokens=8)
    assert len(endpoint.requests) == 1


def test_slow_reply_times_out_and_is_retried(endpoint_factory):
    endpoint = endpoint_factory([("slow", 1.5, "too late"), ("ok", "in time")])
    (reply,) = _player(endpoint, timeout=0.4).generate(["hi"], max_new_tokens=8)
    assert reply.text == "in time"
    assert len(endpoint.requests) == 2


def test_always_slow_is_a_clear_error(endpoint_factory):
    endpoint = endpoint_factory(default=lambda body: ("slow", 1.0, "never"))
    with pytest.raises(PlayerError, match="failed after 2 attempts.*timed out"):
        _player(endpoint, timeout=0.3, max_retries=1).generate(["hi"], max_new_tokens=8)


def test_concurrency_is_bounded_and_order_kept(endpoint_factory):
    # Replies are held until three requests are in flight at once, so the overlap does not depend on how
    # loaded the machine is; a serial client would leave the first one waiting its 3 s and fail below.
    endpoint = endpoint_factory(default=lambda body: ("gate", 3, body["messages"][0]["content"].upper()))
    player = _player(endpoint, concurrency=3)
    prompts = [f"prompt {i}" for i in range(10)]
    replies = player.generate(prompts, max_new_tokens=8, seed=[0] * 10)
    assert [r.text for r in replies] == [p.upper() for p in prompts]
    assert endpoint.max_in_flight == 3  # three at once, never more


def test_missing_key_for_openai_itself(monkeypatch):
    monkeypatch.delenv("SPAG_NO_SUCH_KEY", raising=False)
    with pytest.raises(PlayerError, match="SPAG_NO_SUCH_KEY"):
        OpenAIPlayer("gpt-4", OpenAIOptions(api_key_env="SPAG_NO_SUCH_KEY"))
    # A local endpoint usually needs no key; it also gets the server extensions (top_k, min_tokens).
    local = OpenAIPlayer("m", OpenAIOptions(api_key_env="SPAG_NO_SUCH_KEY", base_url="http://127.0.0.1:9/v1"))
    assert local.extensions


def test_games_through_an_endpoint_serving_a_real_model(endpoint_factory, tmp_path):
    """A full self-play run where both sides are a tiny real model behind an HTTP endpoint."""
    from spag.game.episodes import read_episodes
    from spag.play.engine import PlayConfig, play_games
    from spag.players.hf import HFPlayer
    from spag.testing import make_tiny_checkpoint

    model = HFPlayer.from_pretrained(make_tiny_checkpoint(tmp_path / "tiny"), HFOptions(device="cpu"))
    lock = threading.Lock()

    def answer(body):
        with lock:
            (reply,) = model.generate(
                [body["messages"][0]["content"]],
                temperature=body["temperature"],
                top_k=body.get("top_k", 0),
                max_new_tokens=body["max_tokens"],
                min_new_tokens=body.get("min_tokens", 1),
                seed=body.get("seed"),
            )
        return ("ok", reply.text or "...")

    endpoint = endpoint_factory(default=answer)
    player = _player(endpoint)
    config = PlayConfig.of(max_turns=1, max_new_tokens=6, batch_size=2)
    episodes = play_games(
        player, player, ["apple", "river"], config, output=tmp_path / "out", show_progress=False
    )
    assert [e["target_word"] for e in episodes] == ["apple", "river"]
    assert all(len(e["history"]) == 2 or e["outcome"] != "tie" for e in episodes)
    assert len(endpoint.requests) == sum(len(e["history"]) for e in episodes)
    assert read_episodes(tmp_path / "out")[0]["attacker_model"] == "teacher"


@pytest.mark.parametrize("reply", [("ok", "I know the word! It is apple"), ("error", 400)])
def test_a_password_in_base_url_is_in_no_message_and_no_file(endpoint_factory, tmp_path, reply):
    """spag play --base-url https://user:PASSWORD@host/v1: the summary, an error and every file written show
    the URL with the password masked."""
    from spag.testing import run_cli

    endpoint = endpoint_factory(default=lambda body: reply)
    words = tmp_path / "words.txt"
    words.write_text("apple\n")
    url = endpoint.url.replace("http://", "http://alice:pw-in-url-42@")
    result = run_cli(
        "play",
        "--backend",
        "openai",
        "--attacker",
        "m",
        "--defender",
        "m",
        "--words",
        words,
        "-o",
        tmp_path / "episodes",
        "--export-json",
        tmp_path / "episodes.json",
        "--base-url",
        url,
        "--api-key-env",
        "SPAG_TEST_KEY",
        "--max-turns",
        "1",
        "--no-progress",
    )
    assert result.code == (0 if reply[0] == "ok" else 1), result.stderr
    shown = result.stdout + result.stderr
    assert "pw-in-url-42" not in shown
    assert reply[0] == "ok" or "alice:***@127.0.0.1" in shown
    assert endpoint.requests  # the endpoint was reached: the URL itself was used
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != words]
    assert reply[0] != "ok" or written
    assert not [p for p in written if b"pw-in-url-42" in p.read_bytes()]
