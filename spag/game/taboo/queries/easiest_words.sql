-- Easiest target words: those on which the attacker most often wins (at least $min_games games).
--
-- params: min_games=5, limit=20, epoch=null
-- The attacker opens every game: its wins are word_outcomes' `opener_wins`, the defender's `responder_wins`.
-- The mirror of hardest_words: the attacker's win rate, highest first. Counted over all episodes, or one
-- epoch with --param epoch=N. Ties in the rate are broken by more games first, then alphabetically.
SELECT target_word, games, opener_wins AS attacker_wins, responder_wins AS defender_wins, ties, fouls,
    opener_win_rate AS attacker_win_rate, responder_win_rate AS defender_win_rate
FROM word_outcomes($epoch)
WHERE games >= $min_games
ORDER BY attacker_win_rate DESC, games DESC, target_word
LIMIT $limit
