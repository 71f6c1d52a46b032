-- Foul rate per epoch: the share of games the attacker lost by breaking the rules, with 95% Wilson interval.
--
-- A foul is the judge's outcome attacker_breaks_rules: the attacker said the target word (or a form of
-- it) or used the guessing phrase. foul_rate = fouls / games over all games of the run.
-- mean_foul_turn is the average utterance number (1-based, the judge's `turns`) at which fouls happened.
SELECT
    run,
    epoch,
    count(*) AS games,
    count(*) FILTER (WHERE outcome = 'attacker_breaks_rules') AS fouls,
    rate(count(*) FILTER (WHERE outcome = 'attacker_breaks_rules'), count(*)) AS foul_rate,
    wilson_low(count(*) FILTER (WHERE outcome = 'attacker_breaks_rules'), count(*)) AS ci_low,
    wilson_high(count(*) FILTER (WHERE outcome = 'attacker_breaks_rules'), count(*)) AS ci_high,
    avg(turns) FILTER (WHERE outcome = 'attacker_breaks_rules') AS mean_foul_turn
FROM episodes
GROUP BY run, epoch
ORDER BY epoch NULLS FIRST, run
