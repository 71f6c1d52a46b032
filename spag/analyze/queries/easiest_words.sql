-- Easiest target words: those on which the attacker most often wins (at least $min_games games).
--
-- params: min_games=5, limit=20, epoch=null
-- The mirror of hardest_words: the attacker's win rate, highest first. Counted over all episodes, or one
-- epoch with --param epoch=N. Ties in the rate are broken by more games first, then alphabetically.
SELECT *
FROM word_outcomes($epoch)
WHERE games >= $min_games
ORDER BY attacker_win_rate DESC, games DESC, target_word
LIMIT $limit
