-- Game-length distribution per epoch: how many utterances the judge needed to decide each game, by outcome.
--
-- `turns` is the judge's count of utterances considered (1-based; a tie runs to 2 * max_turns or to the
-- end of a shorter history). One row per (run, epoch, turns); `share` is that length's part of the run's
-- games and `cumulative_share` the part of games no longer than it. `opener_wins` are the opening role's
-- (Adversarial Taboo's attacker), `responder_wins` the other's.
WITH counts AS (
    SELECT
        run,
        epoch,
        turns,
        count(*) AS games,
        count(*) FILTER (WHERE winner_seat = 0) AS opener_wins,
        count(*) FILTER (WHERE winner_seat = 1) AS responder_wins,
        count(*) FILTER (WHERE winner IS NULL AND offender IS NULL) AS ties,
        count(*) FILTER (WHERE offender IS NOT NULL) AS fouls
    FROM episodes
    GROUP BY run, epoch, turns
)
SELECT
    run,
    epoch,
    turns,
    games,
    games / sum(games) OVER (PARTITION BY run, epoch) AS share,
    sum(games) OVER (PARTITION BY run, epoch ORDER BY turns)
        / sum(games) OVER (PARTITION BY run, epoch) AS cumulative_share,
    opener_wins,
    responder_wins,
    ties,
    fouls
FROM counts
ORDER BY epoch NULLS FIRST, run, turns
