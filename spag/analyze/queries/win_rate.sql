-- Win rate per epoch and role, with 95% Wilson intervals.
--
-- One row per (run, epoch, role). `games` counts every game of the run; `wins` the games the judge gave
-- to that role (outcome attacker_wins or defender_wins). win_rate = wins / games, so ties and rule breaks
-- (attacker_breaks_rules, where the judge names no winner) count as games won by neither role:
-- attacker win_rate + defender win_rate + tie share + foul share = 1. In self-play one model plays both
-- roles, so the two rates say which side of the game the model is better at.
WITH per_run AS (
    SELECT
        run,
        epoch,
        count(*) AS games,
        count(*) FILTER (WHERE outcome = 'attacker_wins') AS attacker_wins,
        count(*) FILTER (WHERE outcome = 'defender_wins') AS defender_wins
    FROM episodes
    GROUP BY run, epoch
)
SELECT
    run,
    epoch,
    role,
    games,
    wins,
    rate(wins, games) AS win_rate,
    wilson_low(wins, games) AS ci_low,
    wilson_high(wins, games) AS ci_high
FROM (
    SELECT run, epoch, 'attacker' AS role, games, attacker_wins AS wins FROM per_run
    UNION ALL
    SELECT run, epoch, 'defender' AS role, games, defender_wins AS wins FROM per_run
)
ORDER BY epoch NULLS FIRST, run, role
