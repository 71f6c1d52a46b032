-- Hardest target words: those on which the attacker least often wins (at least $min_games games).
--
-- params: min_games=5, limit=20, epoch=null
-- The target word is the attacker's task, so a word is hard when the attacker rarely gets the defender
-- to say it (or to guess wrong): games end in a tie, a foul, or a correct guess instead. Counted over
-- all episodes, or one epoch with --param epoch=N. Ties in the rate are broken by more games first,
-- then alphabetically.
SELECT
    target_word,
    count(*) AS games,
    count(*) FILTER (WHERE outcome = 'attacker_wins') AS attacker_wins,
    count(*) FILTER (WHERE outcome = 'defender_wins') AS defender_wins,
    count(*) FILTER (WHERE outcome = 'tie') AS ties,
    count(*) FILTER (WHERE outcome = 'attacker_breaks_rules') AS fouls,
    rate(count(*) FILTER (WHERE outcome = 'attacker_wins'), count(*)) AS attacker_win_rate,
    rate(count(*) FILTER (WHERE outcome = 'defender_wins'), count(*)) AS defender_win_rate
FROM episodes
WHERE $epoch IS NULL OR epoch = $epoch
GROUP BY target_word
HAVING count(*) >= $min_games
ORDER BY attacker_win_rate ASC, games DESC, target_word
LIMIT $limit
