"""The game as a plain reset/step environment: the engine's prompts, game end, judge and episode record."""

import pytest

from spag.config import Online
from spag.game.taboo import Taboo
from spag.game.taboo.outcomes import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    ATTACKER_WINS,
    DEFENDER,
    DEFENDER_WINS,
    TIE,
)
from spag.play.engine import PlayConfig, play_games
from spag.play.environment import GameEnvironment, role_rewards
from spag.players import Reply

TABOO = Taboo()


@pytest.mark.parametrize(
    "outcome, attacker, defender",
    [
        (ATTACKER_WINS, 1.0, -1.0),
        (DEFENDER_WINS, -1.0, 1.0),
        (TIE, 0.0, 0.0),
        (ATTACKER_BREAKS_RULES, -1.5, 0.0),
    ],
)
def test_role_rewards_are_zero_sum_and_a_foul_is_worse_than_a_loss(outcome, attacker, defender):
    online = Online()  # the schema's defaults: a win 1, a foul 1.5
    assert role_rewards(TABOO, outcome, online.win_reward, online.foul_game_penalty) == {
        ATTACKER: attacker,
        DEFENDER: defender,
    }


def test_role_rewards_follow_their_settings():
    assert role_rewards(TABOO, ATTACKER_WINS, win_reward=2.0, foul_game_penalty=3.0) == {
        ATTACKER: 2.0,
        DEFENDER: -2.0,
    }
    assert role_rewards(TABOO, ATTACKER_BREAKS_RULES, win_reward=2.0, foul_game_penalty=3.0) == {
        ATTACKER: -3.0,
        DEFENDER: 0.0,
    }


class Lines:
    """A player that says the next of fixed lines, one per call, whatever it is asked; it keeps the prompts."""

    name = "lines"

    def __init__(self, *lines):
        self.lines, self.prompts = list(lines), []

    def generate(self, prompts, **_):
        self.prompts.extend(prompts)
        return [Reply(self.lines.pop(0), 3) for _ in prompts]


@pytest.mark.parametrize(
    "lines, outcome",
    [
        (["Think of a hot drink that wakes you up.", "I know the word! It is coffee"], DEFENDER_WINS),
        (["What dark drink do people have in the morning?", "Usually coffee, with milk."], ATTACKER_WINS),
        (["I could drink coffee all day."], ATTACKER_BREAKS_RULES),
        (["A drink.", "Tea?", "A dark one.", "Cocoa?"], TIE),
    ],
)
def test_a_game_through_the_environment_is_the_engines_game(lines, outcome):
    config = PlayConfig.of(max_turns=2)
    engine_player = Lines(*lines)
    (played,) = play_games(engine_player, engine_player, ["coffee"], config, show_progress=False)

    env = GameEnvironment(config)
    observation = env.reset("coffee")
    prompts, step = [], None
    for line in lines:
        assert not env.done
        prompts.append(observation.prompt)
        assert observation.role == (ATTACKER if len(prompts) % 2 else DEFENDER)
        step = env.step(line)
        observation = step.observation
    assert step.done and observation is None and env.done
    assert step.outcome == played["outcome"] == outcome
    assert step.rewards == role_rewards(TABOO, outcome, 1.0, 1.5)  # the online section's defaults
    assert prompts == engine_player.prompts  # what each player is asked, word for word
    episode = env.episode()
    assert [u["content"] for u in episode["history"]] == [u["content"] for u in played["history"]]
    assert (episode["outcome"], episode["turns"], episode["game_settings"]) == (
        played["outcome"],
        played["turns"],
        played["game_settings"],
    )
    with pytest.raises(RuntimeError, match="the game is over"):
        env.step("one more")


def test_the_defender_is_never_told_the_word():
    env = GameEnvironment(PlayConfig.of(max_turns=3))
    assert "coffee" in env.reset("coffee").prompt
    assert "coffee" not in env.step("A morning drink.").observation.prompt
