"""The OpenAI key goes only where the user sent it; plain http to another machine is warned about."""

import pytest
from test_openai_backend import Endpoint

from spag.players import load_player
from spag.players.openai import OpenAIPlayer, api_key_for
from spag.players.options import OpenAIOptions

OPENAI_SECRET = "sk-openai-secret"
NAMED_SECRET = "sk-named-secret"


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("SPAG_SERVER_KEY", NAMED_SECRET)


@pytest.fixture
def endpoint():
    made = Endpoint()
    yield made
    made.close()


def ask(endpoint, **options):
    player = load_player("m", "openai", base_url=endpoint.url, max_retries=0, timeout=5.0, **options)
    player.generate(["hello"], max_new_tokens=4)
    return endpoint.headers[-1]["authorization"]


def test_openai_key_is_not_sent_to_another_endpoint(keys, endpoint):
    assert OPENAI_SECRET not in ask(endpoint)


def test_a_named_variable_is_sent_to_its_endpoint(keys, endpoint):
    assert ask(endpoint, api_key_env="SPAG_SERVER_KEY") == f"Bearer {NAMED_SECRET}"
    assert ask(endpoint, api_key_env="OPENAI_API_KEY") == f"Bearer {OPENAI_SECRET}"  # named on purpose


def test_openai_key_goes_to_openai_itself(keys):
    assert api_key_for(None, None) == OPENAI_SECRET
    assert api_key_for("https://api.openai.com/v1", None) == OPENAI_SECRET
    assert api_key_for("https://api.openai.com.evil.example/v1", None) is None
    assert api_key_for("http://127.0.0.1:8000/v1", None) is None


@pytest.mark.parametrize(
    "url, warned",
    [
        ("http://10.1.2.3:8000/v1", True),
        ("http://gpu-node-7:8000/v1", True),
        ("http://127.0.0.1:8000/v1", False),
        ("http://localhost:8000/v1", False),
        ("http://[::1]:8000/v1", False),
        ("https://10.1.2.3/v1", False),
    ],
)
def test_plain_http_to_another_host_is_warned_about(keys, capsys, url, warned):
    OpenAIPlayer("m", OpenAIOptions(base_url=url))
    assert ("plain http" in capsys.readouterr().err) == warned


def test_a_password_in_the_base_url_is_never_shown(capsys):
    from spag.players.openai import check_transport, shown_url

    url = "http://alice:s3cret@models.example.org:8000/v1"
    assert shown_url(url) == "http://alice:***@models.example.org:8000/v1"
    assert shown_url("https://models.example.org/v1") == "https://models.example.org/v1"
    check_transport(url)  # plain http to another host: a warning that names the URL
    shown = capsys.readouterr()
    assert "models.example.org" in shown.out + shown.err and "s3cret" not in shown.out + shown.err
