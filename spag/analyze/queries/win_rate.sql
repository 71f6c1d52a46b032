-- Win rate per epoch and role, with 95% Wilson intervals.
--
-- One row per (run, epoch, role), the roles of the episodes' game (the `roles` table). `games` counts
-- every game of the run; `wins` the games the judge gave to that role (the view's `winner`), so games
-- nobody won (ties, and rule breaks, where the judge names an offender and no winner) count for neither
-- role: the roles' win rates plus the tie share plus the foul share = 1. In self-play one model plays both
-- roles, so the rates say which side of the game the model is better at.
WITH per_run AS (
    SELECT run, epoch, coalesce(game, 'taboo') AS game, count(*) AS games
    FROM episodes
    GROUP BY run, epoch, coalesce(game, 'taboo')
), wins AS (
    SELECT run, epoch, winner AS role, count(*) AS wins
    FROM episodes
    WHERE winner IS NOT NULL
    GROUP BY run, epoch, winner
)
SELECT
    p.run,
    p.epoch,
    r.role,
    p.games,
    coalesce(w.wins, 0) AS wins,
    rate(coalesce(w.wins, 0), p.games) AS win_rate,
    wilson_low(coalesce(w.wins, 0), p.games) AS ci_low,
    wilson_high(coalesce(w.wins, 0), p.games) AS ci_high
FROM per_run p
JOIN roles r USING (game)
LEFT JOIN wins w ON w.run = p.run AND w.epoch IS NOT DISTINCT FROM p.epoch AND w.role = r.role
ORDER BY p.epoch NULLS FIRST, p.run, r.seat
