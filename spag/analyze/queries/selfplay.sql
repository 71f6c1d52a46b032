-- Self-play statistics per epoch: decisive and foul rates, game length, reply length and truncation.
--
-- One row per (run, epoch). Rates are shares of the run's games with 95% Wilson intervals (`_low`,
-- `_high`): decisive = won by either side, foul = ended by a rule break (in Adversarial Taboo, the attacker
-- said the word). Each role's win rate is the `win_rate` query's. `mean_turns` is the judge's
-- count of utterances per game; `mean_reply_tokens` the generated tokens per utterance and
-- `truncated_share` the utterances cut at max_new_tokens (both from the `generated_tokens` and
-- `truncated_replies` columns that `spag play` stores; NULL for episodes without them).
WITH per_game AS (
    SELECT
        run,
        epoch,
        winner,
        offender,
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
        count(*) FILTER (WHERE winner IS NOT NULL) AS decisive,
        count(*) FILTER (WHERE offender IS NOT NULL) AS fouls,
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
    mean_turns,
    mean_reply_tokens,
    truncated_share
FROM counts
ORDER BY epoch NULLS FIRST, run
