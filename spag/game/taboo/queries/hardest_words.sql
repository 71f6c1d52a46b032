-- Hardest target words: those on which the attacker least often wins (at least $min_games games).
--
-- params: min_games=5, limit=20, epoch=null
-- The attacker opens every game: its wins are word_outcomes' `opener_wins`, the defender's `responder_wins`.
-- The target word is the attacker's task, so a word is hard when the attacker rarely gets the defender
-- to say it (or to guess wrong): games end in a tie, a foul, or a correct guess instead. Counted over
-- all episodes, or one epoch with --param epoch=N. Ties in the rate are broken by more games first,
-- then alphabetically.
SELECT target_word, games, opener_wins AS attacker_wins, responder_wins AS defender_wins, ties, fouls,
    opener_win_rate AS attacker_win_rate, responder_win_rate AS defender_win_rate
FROM word_outcomes($epoch)
WHERE games >= $min_games
ORDER BY attacker_win_rate ASC, games DESC, target_word
LIMIT $limit
