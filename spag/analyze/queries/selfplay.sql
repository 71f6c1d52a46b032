-- Self-play statistics per epoch: decisive, foul and win rates, game length, reply length and truncation.
--
-- One row per (run, epoch). Rates are shares of the run's games with 95% Wilson intervals (`_low`,
-- `_high`): decisive = won by either side, foul = the attacker said the word. `mean_turns` is the judge's
-- count of utterances per game; `mean_reply_tokens` the generated tokens per utterance and
-- `truncated_share` the utterances cut at max_new_tokens (both from the `generated_tokens` and
-- `truncated_replies` columns that `spag play` stores; NULL for episodes without them).
WITH per_game AS (
    SELECT
        run,
        epoch,
        outcome,
        turns,
        len(history) AS replies,
        generated_tokens AS reply_tokens,
        truncated_replies AS truncated
    FROM episodes
),
counts AS (
    SELECT
        run,
        epoch,
        count(*) AS games,
        count(*) FILTER (WHERE outcome IN ('attacker_wins', 'defender_wins')) AS decisive,
        count(*) FILTER (WHERE outcome = 'attacker_breaks_rules') AS fouls,
        count(*) FILTER (WHERE outcome = 'attacker_wins') AS attacker_wins,
        count(*) FILTER (WHERE outcome = 'defender_wins') AS defender_wins,
        avg(turns) AS mean_turns,
        sum(reply_tokens)::DOUBLE / NULLIF(sum(replies), 0) AS mean_reply_tokens,
        sum(truncated)::DOUBLE / NULLIF(sum(replies), 0) AS truncated_share
    FROM per_game
    GROUP BY run, epoch
)
SELECT
    run,
    epoch,
    games,
    rate(decisive, games) AS decisive_rate,
    wilson_low(decisive, games) AS decisive_rate_low,
    wilson_high(decisive, games) AS decisive_rate_high,
    rate(fouls, games) AS foul_rate,
    wilson_low(fouls, games) AS foul_rate_low,
    wilson_high(fouls, games) AS foul_rate_high,
    rate(attacker_wins, games) AS attacker_win_rate,
    wilson_low(attacker_wins, games) AS attacker_win_rate_low,
    wilson_high(attacker_wins, games) AS attacker_win_rate_high,
    rate(defender_wins, games) AS defender_win_rate,
    wilson_low(defender_wins, games) AS defender_win_rate_low,
    wilson_high(defender_wins, games) AS defender_win_rate_high,
    mean_turns,
    mean_reply_tokens,
    truncated_share
FROM counts
ORDER BY epoch NULLS FIRST, run
