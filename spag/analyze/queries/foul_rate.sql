-- Foul rate per epoch: the share of games a player lost by breaking the rules, with 95% Wilson interval.
--
-- A foul is a game the judge ended on a rule break (the view's `offender`; in Adversarial Taboo the
-- attacker said the target word, or a form of it, or used the guessing phrase). foul_rate = fouls / games
-- over all games of the run. mean_foul_turn is the average utterance number (1-based, the judge's `turns`)
-- at which fouls happened.
SELECT
    run,
    epoch,
    count(*) AS games,
    count(*) FILTER (WHERE offender IS NOT NULL) AS fouls,
    rate(count(*) FILTER (WHERE offender IS NOT NULL), count(*)) AS foul_rate,
    wilson_low(count(*) FILTER (WHERE offender IS NOT NULL), count(*)) AS ci_low,
    wilson_high(count(*) FILTER (WHERE offender IS NOT NULL), count(*)) AS ci_high,
    avg(turns) FILTER (WHERE offender IS NOT NULL) AS mean_foul_turn
FROM episodes
GROUP BY run, epoch
ORDER BY epoch NULLS FIRST, run
