"""Kuhn poker (spag/game/kuhn) and the Game interface every registered game keeps."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from spag.config import Reward, load_settings
from spag.evaluate.games import per_word_by_role, tally_games, word_bootstrap
from spag.game.base import Verdict
from spag.game.episodes import validate_episode
from spag.game.kuhn import (
    CARDS,
    DEALS,
    FIRST,
    FIRST_BREAKS_RULES,
    FIRST_WINS,
    SECOND,
    SECOND_BREAKS_RULES,
    SECOND_WINS,
    TEACHERS,
    KuhnPoker,
    TableStrategy,
    action_of,
    teacher_table,
)
from spag.game.kuhn.card import KuhnSettings, KuhnStrategies
from spag.game.registry import GAMES, episode_game
from spag.play.engine import PlayConfig, play_games
from spag.players.base import Speaker, Turn
from spag.rewards.build import reward_rows
from spag.runtime.errors import DataError

KUHN = KuhnPoker()
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def hand(deal: str, *actions: str) -> list[dict]:
    return [
        {"role": (FIRST, SECOND)[i % 2], "content": f"I will [{a}]." if a else "hmm"}
        for i, a in enumerate(actions)
    ]


# --------------------------------------------------------------------------------------------- judge


@pytest.mark.parametrize(
    "deal, actions, outcome, cause, turns",
    [
        ("K-Q", ("check", "check"), FIRST_WINS, "first_showdown", 2),
        ("J-Q", ("check", "check"), SECOND_WINS, "second_showdown", 2),
        ("Q-K", ("bet", "call"), SECOND_WINS, "second_showdown", 2),
        ("J-K", ("bet", "fold"), FIRST_WINS, "second_folded", 2),
        ("K-J", ("check", "bet", "fold"), SECOND_WINS, "first_folded", 3),
        ("K-J", ("check", "bet", "call"), FIRST_WINS, "first_showdown", 3),
        ("Q-J", ("call",), FIRST_BREAKS_RULES, "first_illegal", 1),  # nothing to call
        ("Q-J", ("bet", "check"), SECOND_BREAKS_RULES, "second_illegal", 2),  # a bet must be called or folded
        ("Q-J", ("check", None), SECOND_BREAKS_RULES, "second_illegal", 2),  # no bracketed action
    ],
)
def test_every_line_of_play_is_judged(deal, actions, outcome, cause, turns):
    verdict = KUHN.judge(deal, hand(deal, *actions))
    assert (verdict.outcome, verdict.cause, verdict.turns) == (outcome, cause, turns)
    winner, offender = KUHN.outcome_sides[outcome]
    assert (verdict.winner, verdict.offender) == (winner, offender) and verdict.decided


def test_the_first_bracketed_action_counts_and_later_utterances_are_ignored():
    assert action_of("I think [Bet] then [fold]") == "bet" and action_of("bet") is None
    history = hand("K-Q", "check", "check") + [{"role": FIRST, "content": "[bet]"}]
    assert KUHN.judge("K-Q", history).turns == 2
    short = KuhnPoker(KuhnSettings(max_turns=1))
    assert short.judge("K-Q", hand("K-Q", "check", "bet")) == Verdict("unfinished", 2, "out_of_turns")
    with pytest.raises(ValueError, match="not a Kuhn poker deal"):
        KUHN.judge("A-K", hand("A-K", "check"))


def test_each_player_sees_its_own_card_and_the_legal_actions():
    first = KUHN.prompt(FIRST, "K-Q", [], KuhnStrategies())
    second = KUHN.prompt(SECOND, "K-Q", hand("K-Q", "bet"), KuhnStrategies())
    assert "Your card: K." in first and "Q." not in first.split("Your card:")[1]
    assert "Your card: Q." in second and "Player 0: [bet]" in second
    assert second.endswith("reply with [call] or [fold].") and first.endswith("reply with [check] or [bet].")
    assert KUHN.row_prompt(SECOND, "K-Q", hand("K-Q", "bet"), random.Random(0)) == (second, None)


def test_with_say_card_the_prompt_asks_for_the_card_and_the_teacher_names_it_before_acting():
    game = KuhnPoker(KuhnSettings(say_card=True))
    prompt = game.prompt(SECOND, "K-Q", hand("K-Q", "bet"), KuhnStrategies())
    assert prompt.endswith('reply with "My card: Q." and then [call] or [fold].')
    assert (
        prompt.split("\nYour move")[0]
        == KUHN.prompt(SECOND, "K-Q", hand("K-Q", "bet"), KuhnStrategies()).split("\nYour move")[0]
    )  # the rest of the prompt is the plain game's
    config = PlayConfig.of(game, equilibrium=True, seed=3)
    episodes = play_games(Silent(), Silent(), list(DEALS) * 4, config, show_progress=False)
    for episode in episodes:
        dealt = dict(zip((FIRST, SECOND), episode["target_word"].split("-")))
        for utterance in episode["history"]:
            card = dealt[utterance["role"]]
            assert utterance["content"] == f"My card: {card}. [{action_of(utterance['content'])}]"
        # judged by its actions alone, as the plain game judges the same line
        plain = [{**u, "content": f"[{action_of(u['content'])}]"} for u in episode["history"]]
        assert game.judge(episode["target_word"], episode["history"]) == KUHN.judge(
            episode["target_word"], plain
        )
        assert episode["outcome"] in (FIRST_WINS, SECOND_WINS)
    # the other player sees the actions only, never the card a reply named
    later = game.prompt(SECOND, "J-K", [{"role": FIRST, "content": "My card: J. [bet]"}], KuhnStrategies())
    assert "Player 0: [bet]" in later and "card: J" not in later


def test_a_kuhn_episode_names_its_game_and_its_roles_are_checked():
    episode = {"target_word": "K-Q", "history": hand("K-Q", "bet", "fold"), **KUHN.record()}
    assert episode_game(episode).name == "kuhn-poker"
    assert validate_episode(episode, 0)["history"][1]["role"] == SECOND
    with pytest.raises(DataError, match="unknown role 'attacker' \\(first\\|second\\)"):
        validate_episode({**episode, "history": [{"role": "attacker", "content": "[bet]"}]}, 3, "e.json")


# ------------------------------------------------------------------------------------------ teacher


def test_the_equilibrium_plays_legal_actions_at_the_equilibrium_frequencies():
    speaker = TableStrategy(Speaker(object()), TEACHERS["equilibrium"], seed=0)
    opening = Counter()
    for _ in range(3000):
        for card in "JQK":
            deal = f"{card}-{'Q' if card != 'Q' else 'K'}"
            opening[card, speaker.action(Turn(FIRST, deal, [], ""))] += 1
    assert opening["K", "bet"] == 3000 and opening["Q", "check"] == 3000
    assert opening["J", "bet"] / 3000 == pytest.approx(1 / 3, abs=0.03)  # the bluff
    facing = [speaker.action(Turn(SECOND, "Q-J", hand("Q-J", "bet"), "")) for _ in range(500)]
    assert set(facing) == {"fold"}  # J never calls a bet


class Silent:  # never asked: a fixed strategy answers every turn
    name = "silent"

    def generate(self, prompts, **_):
        raise AssertionError("the model was asked")


def test_a_teacher_with_the_equilibrium_wins_every_hand_by_a_legal_line():
    config = PlayConfig.of("kuhn-poker", equilibrium=True, seed=3)
    deals = list(DEALS) * 20
    episodes = play_games(Silent(), Silent(), deals, config, show_progress=False)
    assert {e["outcome"] for e in episodes} <= {FIRST_WINS, SECOND_WINS}
    assert json.loads(episodes[0]["strategies"]) == {
        "equilibrium": True,
        "uniform": False,
        "always_bet": False,
        "explore": 0.0,
    }
    # the game's value is -1/18 for the first player: its average winnings are below zero
    chips = [
        (1 if e["outcome"] == FIRST_WINS else -1) * (2 if "[call]" in str(e["history"]) else 1)
        for e in episodes
    ]
    assert sum(chips) / len(chips) == pytest.approx(-1 / 18, abs=0.15)


def test_a_teachers_hands_are_the_same_in_any_batch_and_after_a_resume(tmp_path):
    """M7 (fourth attack): the table strategies drew from one stream per player, in the order the engine
    asked, so after a resume 2 of 6 hands differed, and another batch size changed 4 of 6. Each draw is now
    the turn's own (its game's and utterance's seed)."""
    deals = list(DEALS) * 4

    def hands(batch_size, **options):
        config = PlayConfig.of("kuhn-poker", uniform=True, seed=5, batch_size=batch_size)
        return [
            [u["content"] for u in e["history"]]
            for e in play_games(Silent(), Silent(), deals, config, show_progress=False, **options)
        ]

    whole = hands(24)
    assert len({tuple(h) for h in whole}) > 3  # the uniform teacher plays varied hands
    assert hands(1) == whole and hands(5) == whole
    # a run that stopped after its first 10 hands, resumed: the same 24 hands
    first = PlayConfig.of("kuhn-poker", uniform=True, seed=5, batch_size=4)
    play_games(Silent(), Silent(), deals[:10], first, output=tmp_path / "episodes", show_progress=False)
    resumed = hands(4, output=tmp_path / "episodes", resume=True)
    assert resumed == whole


# Each information set: (the actions before it, the role that acts, the aggressive action, the other one).
INFORMATION_SETS = [
    ((), FIRST, "bet", "check"),
    (("check", "bet"), FIRST, "call", "fold"),
    (("check",), SECOND, "bet", "check"),
    (("bet",), SECOND, "call", "fold"),
]


@pytest.mark.parametrize("name, bold", [("uniform", 0.5), ("always_bet", 1.0)])
def test_the_weak_teachers_play_their_tables_at_every_information_set(name, bold):
    strategies = KuhnStrategies(**{name: True})
    table = teacher_table(strategies)
    assert table is TEACHERS[name] and teacher_table(KuhnStrategies()) is None
    speaker = KUHN.speaker(object(), (FIRST, SECOND), strategies, seed=1)
    for actions, role, aggressive, passive in INFORMATION_SETS:
        for card in "JQK":
            assert table[",".join(actions)][card] == bold  # the table, exactly
            deal = (
                f"{card}-{'Q' if card != 'Q' else 'K'}"
                if role == FIRST
                else f"{'Q' if card != 'Q' else 'K'}-{card}"
            )
            played = Counter(speaker.action(Turn(role, deal, hand(deal, *actions), "")) for _ in range(400))
            assert set(played) <= {aggressive, passive}  # always a legal action
            assert played[aggressive] / 400 == pytest.approx(bold, abs=0.08)


def test_one_teacher_at_a_time_chosen_like_the_equilibrium(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match="always_bet: one fixed strategy at a time, and uniform is on too"
    ):
        KuhnStrategies(uniform=True, always_bet=True)
    override = tmp_path / "uniform.yaml"
    override.write_text("teacher.strategies: {uniform: true}\n")
    settings = load_settings(ROOT / "params.yaml", [ROOT / "configs" / "kuhn-poker.yaml", override])
    assert settings.strategies() == KuhnStrategies(uniform=True)
    config = PlayConfig.of("kuhn-poker", always_bet=True, seed=0)
    episodes = play_games(Silent(), Silent(), list(DEALS), config, show_progress=False)
    assert all([u["content"] for u in e["history"]] == ["[bet]", "[call]"] for e in episodes)


def test_explore_mixes_the_teacher_with_the_uniform_strategy_at_every_decision(tmp_path):
    from pydantic import ValidationError

    strategies = KuhnStrategies(equilibrium=True, explore=0.5)
    table = teacher_table(strategies)
    for history, row in TEACHERS["equilibrium"].items():
        for card, p in row.items():
            assert table[history][card] == pytest.approx(0.5 * p + 0.25)  # every action now played
    assert teacher_table(KuhnStrategies(equilibrium=True, explore=1.0)) == TEACHERS["uniform"]
    assert teacher_table(KuhnStrategies(equilibrium=True)) is TEACHERS["equilibrium"]
    # Played as mixed: J facing a bet, never called by the equilibrium, is called a quarter of the time.
    speaker = KUHN.speaker(object(), (FIRST, SECOND), strategies, seed=2)
    facing = Counter(speaker.action(Turn(SECOND, "Q-J", hand("Q-J", "bet"), "")) for _ in range(2000))
    assert facing["call"] / 2000 == pytest.approx(0.25, abs=0.04)
    with pytest.raises(ValidationError, match="explore: mixes a fixed strategy .* and none is on"):
        KuhnStrategies(explore=0.5)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        KuhnStrategies(equilibrium=True, explore=1.5)
    override = tmp_path / "mixed.yaml"
    override.write_text("teacher.strategies: {equilibrium: true, explore: 0.5}\n")
    settings = load_settings(ROOT / "params.yaml", [ROOT / "configs" / "kuhn-poker.yaml", override])
    assert settings.strategies() == strategies


# ------------------------------------------------------------------------------------ rewards, results


# Every way a hand ends, with the first player's chips for each deal's higher card (first high, first low).
@pytest.mark.parametrize(
    "actions, high, low",
    [
        (("check", "check"), 1, -1),
        (("bet", "call"), 2, -2),
        (("check", "bet", "call"), 2, -2),
        (("bet", "fold"), 1, 1),  # the second folds: the first takes its ante
        (("check", "bet", "fold"), -1, -1),  # the first folds
        (("call",), -1, -1),  # the first breaks the rules at once: a fold, its ante lost
        (("bet", "check"), 1, 1),  # the second breaks the rules facing a bet: it loses its ante
        (("check", None), 1, 1),  # the second says no action
        (
            ("check", "bet", "check"),
            -1,
            -1,
        ),  # the first breaks the rules facing a bet: its bet was never made
    ],
)
def test_every_hand_pays_its_chips_in_both_seats(actions, high, low):
    for deal in DEALS:
        first, second = deal.split("-")
        mine = high if CARDS.index(first) > CARDS.index(second) else low
        assert KUHN.chips(deal, hand(deal, *actions)) == {FIRST: mine, SECOND: -mine}


def test_an_unfinished_hand_pays_nothing_and_taboo_plays_for_no_chips():
    short = KuhnPoker(KuhnSettings(max_turns=1))
    assert short.chips("K-Q", hand("K-Q", "check", "bet")) == {FIRST: 0.0, SECOND: 0.0}
    assert KUHN.for_chips and not GAMES["taboo"].for_chips
    with pytest.raises(ValueError, match="not played for chips"):
        GAMES["taboo"]().chips("coffee", [])


def test_chips_pay_both_players_signed_rows():
    games = [
        {"target_word": "Q-K", "max_turns": 2, "history": hand("Q-K", "bet", "call")},  # second +2
        {"target_word": "K-J", "max_turns": 2, "history": hand("K-J", "check", "bet", "fold")},  # second +1
        {"target_word": "K-Q", "max_turns": 2, "history": hand("K-Q", "check", None)},
    ]  # first +1
    rows, stats = reward_rows(games, options=Reward(payoff="chips", decay=0.5), game=KUHN)
    paid = [(r["episode"], r["role"], r["completion"], r["reward"]) for r in rows]
    assert paid == [
        ("0", FIRST, "I will [bet].", -2.0),
        ("0", SECOND, "I will [call].", 2.0),
        # the first's two lines share its chip lost: (1/d)^k, the later one weighing more
        ("1", FIRST, "I will [check].", pytest.approx(-1 / 3)),
        ("1", SECOND, "I will [bet].", 1.0),
        ("1", FIRST, "I will [fold].", pytest.approx(-2 / 3)),
        ("2", FIRST, "I will [check].", 1.0),
        ("2", SECOND, "hmm", -1.0),
    ]
    assert stats.negative_rows == 4 and stats.role_games == {FIRST: 3, SECOND: 3}
    assert [r["weight"] for r in rows] == [1.0] * 7
    # the default pays a win as a win: the winners' lines only
    rows, _ = reward_rows(games, options=Reward(decay=0.5), game=KUHN)
    assert [(r["role"], r["reward"]) for r in rows] == [(SECOND, 1.0), (SECOND, 1.0)]  # no winner of a foul


def test_chips_are_refused_for_a_game_without_them_in_one_line(tmp_path):
    from pydantic import ValidationError

    from spag.testing import run_cli

    with pytest.raises(ValidationError, match="loser_reward: the loser's lines already pay its chips lost"):
        Reward(payoff="chips", loser_reward=-1.0)
    override = tmp_path / "chips.yaml"
    override.write_text("reward.payoff: chips\n")
    with pytest.raises(
        Exception, match="reward.payoff: the game taboo is not played for chips \\(use wins\\)"
    ):
        load_settings(ROOT / "params.yaml", [override])
    assert (
        load_settings(ROOT / "params.yaml", [ROOT / "configs" / "kuhn-poker.yaml", override]).reward.payoff
        == "chips"
    )
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(
        json.dumps(
            {
                "target_word": "coffee",
                "max_turns": 1,
                "history": [{"role": "attacker", "content": "hi"}, {"role": "defender", "content": "hello"}],
            }
        )
        + "\n"
    )
    result = run_cli("reward", str(episodes), "-o", str(tmp_path / "rows.jsonl"), "--payoff", "chips")
    assert result.code == 2 and not (tmp_path / "rows.jsonl").exists()
    assert result.stderr.strip() == "error: --payoff: the game taboo is not played for chips (use wins)"


def test_all_of_a_teachers_moves_are_imitated_in_every_game_but_a_rule_break(tmp_path):
    from spag.config import Imitate
    from spag.rewards.build import build_imitation_set, imitation_rows

    games = [
        {"target_word": "J-K", "max_turns": 2, "history": hand("J-K", "bet", "fold")},  # first wins
        {"target_word": "K-J", "max_turns": 2, "history": hand("K-J", "check", "bet", "fold")},  # second wins
        {"target_word": "K-Q", "max_turns": 2, "history": hand("K-Q", "check", None)},
    ]  # a rule break
    winners, _ = imitation_rows(games, game=KUHN)
    assert [(r["episode"], r["role"], r["completion"]) for r in winners] == [
        ("0", FIRST, "I will [bet]."),
        ("1", SECOND, "I will [bet]."),
    ]  # a fold never wins: never imitated
    every, stats = imitation_rows(games, game=KUHN, moves="all")
    assert [(r["episode"], r["role"], r["completion"]) for r in every] == [
        ("0", FIRST, "I will [bet]."),
        ("0", SECOND, "I will [fold]."),
        ("1", FIRST, "I will [check]."),
        ("1", SECOND, "I will [bet]."),
        ("1", FIRST, "I will [fold]."),
        ("2", FIRST, "I will [check]."),
    ]  # the second's "hmm" broke the rules: left out
    assert all(r["reward"] == 1.0 for r in every)
    # role weights as for the winners' rows: (A + D) / 2A for the 3 games of the first, (A + D) / 2D the second
    assert stats.role_games == {FIRST: 3, SECOND: 2} and stats.used == 3
    assert {r["role"]: r["weight"] for r in every} == {
        FIRST: pytest.approx(5 / 6),
        SECOND: pytest.approx(5 / 4),
    }
    # the prompt of each row is the state its move was made in
    assert "Your card: K." in every[2]["prompt"] and "Actions so far: none yet." in every[2]["prompt"]
    assert "Player 0: [check]; Player 1: [bet]" in every[4]["prompt"]
    # the setting reaches the file the imitation stage writes
    source = tmp_path / "episodes.jsonl"
    source.write_text("".join(json.dumps(g) + "\n" for g in games))
    build_imitation_set(source, tmp_path / "rows.jsonl", Imitate(moves="all"), KUHN)
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 6
    with pytest.raises(ValueError, match="moves"):
        Imitate(moves="losers")


def test_ready_made_rows_of_kuhn_poker_keep_their_roles(tmp_path):
    from spag.rewards.build import build_imitation_set
    from spag.rewards.ready_made import import_ready_made_rows

    prompt = KUHN.prompt(SECOND, "J-K", hand("J-K", "bet"), KUHN.Strategies())
    source = tmp_path / "ready.jsonl"
    records = [
        {"prompt": prompt, "completion": "[call]"},  # the seat read from the prompt
        {"prompt": "Say something.", "completion": "[bet]", "role": FIRST},  # the role given
        {"prompt": "Say something.", "completion": "[bet]"},
    ]  # neither: no role
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert import_ready_made_rows(source, tmp_path / "teacher", KUHN) == 3
    stats = build_imitation_set(tmp_path / "teacher", tmp_path / "rows.jsonl", game=KUHN)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["role"] for r in rows] == [SECOND, FIRST, None] and stats.instruction_rows == 3
    # a role the game does not have is refused, naming the record
    source.write_text(json.dumps({"prompt": prompt, "completion": "[call]", "role": "attacker"}) + "\n")
    with pytest.raises(
        DataError, match=r"ready.jsonl: record 0: 'role' 'attacker' is not a role of Kuhn poker"
    ):
        import_ready_made_rows(source, tmp_path / "other", KUHN)
    assert not (tmp_path / "other").exists()


def test_rewards_go_to_the_winners_actions_and_a_penalty_to_the_rule_breaker():
    games = [
        {"target_word": "J-K", "max_turns": 2, "history": hand("J-K", "bet", "fold")},
        {"target_word": "K-Q", "max_turns": 2, "history": hand("K-Q", "check", None)},
    ]
    rows, stats = reward_rows(games, options=Reward(foul_line_penalty=1.0), game=KUHN)
    assert [(r["role"], r["completion"], r["reward"]) for r in rows] == [
        (FIRST, "I will [bet].", 1.0),
        (SECOND, "hmm", -1.0),
    ]
    assert stats.role_games == {FIRST: 1, SECOND: 1} and stats.outcomes == {
        FIRST_WINS: 1,
        SECOND_BREAKS_RULES: 1,
    }


def test_evaluation_counts_each_roles_games_by_how_they_ended():
    as_first = [
        {"target_word": "K-J", "max_turns": 2, "history": hand("K-J", "bet", "fold"), "outcome": FIRST_WINS},
        {"target_word": "J-K", "max_turns": 2, "history": hand("J-K", None), "outcome": FIRST_BREAKS_RULES},
    ]
    as_second = [
        {
            "target_word": "K-J",
            "max_turns": 2,
            "history": hand("K-J", "check", "check"),
            "outcome": FIRST_WINS,
        }
    ]
    metrics = tally_games(KUHN, as_first, as_second)
    assert metrics[FIRST]["wins"] == 1 and metrics[FIRST]["fouls"] == 1 and metrics[SECOND]["losses"] == 1
    boot = word_bootstrap(KUHN, as_first, as_second, n_resamples=50)
    assert {"first_win_rate", "first_foul_rate", "first_opponent_foul_rate", "second_win_rate"} <= set(boot)
    parts = boot["decomposition"]
    assert (
        parts[FIRST]["win_opponent_folded"]["value"] == 0.5
        and parts[FIRST]["foul_illegal_action"]["value"] == 0.5
    )
    assert parts[SECOND]["loss_showdown"]["value"] == 1.0
    assert set(per_word_by_role(KUHN, as_first, as_second)) >= {"first/score", "second/loss_showdown"}


def test_the_preset_makes_a_valid_params_file():
    settings = load_settings(ROOT / "params.yaml", [ROOT / "configs" / "kuhn-poker.yaml"])
    assert settings.game == KuhnSettings(max_turns=2) and settings.strategies() == KuhnStrategies(
        equilibrium=True
    )
    assert settings.evaluate.skill is None and settings.evaluate.baselines is None


# ------------------------------------------------------------------------------ every game's contract


@pytest.mark.parametrize("name", sorted(GAMES))
def test_every_game_keeps_the_interface(name):
    game = GAMES[name]()
    assert game.name == name and len(game.roles) == 2 and game.next_role([]) == game.roles[0]
    assert set(game.outcomes) == set(game.outcome_sides) == set(game.causes)
    for role in game.roles:  # every way a game can end is something for each role
        assert set(game.parts[role]) == {c for causes in game.causes.values() for c in causes}
    assert game.skill_causes <= {
        c for o, causes in game.causes.items() for c in causes if game.outcome_sides[o][0]
    }
    for outcome, (winner, offender) in game.outcome_sides.items():
        assert winner in (None, *game.roles) and offender in (None, *game.roles) and not (winner and offender)
        for role in game.roles:
            assert game.score(outcome, role) == (
                1.0
                if role == winner or (offender and role != offender)
                else 0.5
                if not (winner or offender)
                else 0.0
            )
    targets = game.targets(load_settings(None).words) if game.few_targets else None
    assert targets is None or len(targets) == len(set(targets)) > 1
    assert game.Settings(name=name).name == name and game.Strategies() is not None


def test_a_game_is_played_with_its_own_strategies():
    with pytest.raises(ValueError, match="are not the strategies of kuhn-poker"):
        PlayConfig(KUHN, strategies=GAMES["taboo"].Strategies())


@pytest.mark.parametrize("command", ["reward", "imitation-data"])
def test_kuhn_episodes_without_the_game_are_refused_in_one_line(tmp_path, command):
    """The fourth attack: Kuhn poker episodes given to spag reward or imitation-data without --game ended in a
    traceback (`unknown role 'first'`), where spag judge gives one line."""
    from spag.testing import run_cli

    source = tmp_path / "hands.jsonl"
    source.write_text(
        json.dumps(
            {"target_word": "K-Q", "max_turns": 2, "history": hand("K-Q", "bet", "fold"), **KUHN.record()}
        )
        + "\n"
    )
    result = run_cli(command, source, "-o", tmp_path / "rows.jsonl")
    assert result.code == 2 and "Traceback" not in result.stderr and not (tmp_path / "rows.jsonl").exists()
    assert result.error_lines()[-1].endswith(
        "was played in kuhn-poker, not taboo: give --game kuhn-poker (or a "
        "params file of that game)); nothing written"
    )
    assert run_cli(command, source, "-o", tmp_path / "rows.jsonl", "--game", "kuhn-poker").code == 0


def test_a_deal_listed_twice_is_dealt_twice_and_taboo_options_are_refused(tmp_path):
    """Lows of the fourth attack: a repeated deal was dropped (a Kuhn poker list of deals may deal one twice),
    and Adversarial Taboo's --guess-words was taken for Kuhn poker."""
    from spag.game.words import read_words
    from spag.testing import make_tiny_checkpoint, run_cli

    deals = tmp_path / "deals.txt"
    deals.write_text("K-Q\nK-Q\nJ-K\n")
    assert read_words(deals, repeats=True) == ["K-Q", "K-Q", "J-K"] and read_words(deals) == ["K-Q", "J-K"]
    model = make_tiny_checkpoint(tmp_path / "tiny")
    out = tmp_path / "hands"
    played = run_cli(
        "play",
        "--game",
        "kuhn-poker",
        "--attacker",
        model,
        "--defender",
        model,
        "--words",
        deals,
        "-o",
        out,
        "--equilibrium",
        "--no-progress",
    )
    assert played.code == 0, played.stderr
    from spag.game.episodes import read_episodes

    assert sorted(e["target_word"] for e in read_episodes(out, KUHN)) == ["J-K", "K-Q", "K-Q"]
    refused = run_cli(
        "play",
        "--game",
        "kuhn-poker",
        "--attacker",
        model,
        "--defender",
        model,
        "--words",
        deals,
        "-o",
        tmp_path / "other",
        "--guess-words",
        deals,
    )
    assert refused.code == 2 and refused.error_lines() == [
        "error: --guess-words: the game kuhn-poker has no strategy that chooses among words"
    ]
    assert not (tmp_path / "other").exists()


def test_an_episodes_recorded_settings_are_named_without_pydantics_link(tmp_path):
    from spag.testing import run_cli

    source = tmp_path / "e.jsonl"
    source.write_text(
        json.dumps(
            {
                "target_word": "coffee",
                "max_turns": 1,
                "game": "taboo",
                "game_settings": json.dumps({"rules": "nope"}),
                "history": [{"role": "attacker", "content": "hi"}],
            }
        )
        + "\n"
    )
    judged = run_cli("judge", source)
    assert judged.code == 2 and "pydantic" not in judged.stderr
    assert judged.error_lines() == [
        f"error: {source}: record 0: 'game_settings': rules: Input should be "
        "'whole-word' or 'original', got 'nope'"
    ]
