-- Episodes that the whole-word judge and the original code's judge decide differently, with both verdicts.
--
-- params: limit=50
-- Both rule sets judge every episode afresh (spag_judge_by); an episode is listed when the outcome or
-- the deciding utterance differs. The original counts substrings ("category" says "cat"), only the
-- forms w, w+ing, w+ed and plural(w), and a guess only as "i know the word! it" + 1-8 characters + a form.
-- The summary per run: SELECT run, count(*) FROM (<this query without LIMIT>) GROUP BY run.
WITH judged AS (
    SELECT
        run,
        epoch,
        target_word,
        to_json(history)::VARCHAR AS history_json,
        coalesce(max_turns, 5)::INTEGER AS turns_allowed
    FROM episodes
), both_rules AS (
    SELECT
        *,
        spag_judge_by('taboo', '{"rules": "whole-word"}', target_word, history_json, turns_allowed) AS whole_word,
        spag_judge_by('taboo', '{"rules": "original"}', target_word, history_json, turns_allowed) AS original
    FROM judged
)
SELECT
    run,
    epoch,
    target_word,
    whole_word.outcome AS whole_word_outcome,
    whole_word.turns AS whole_word_turns,
    original.outcome AS original_outcome,
    original.turns AS original_turns,
    history_json AS history
FROM both_rules
WHERE whole_word IS DISTINCT FROM original
ORDER BY epoch NULLS FIRST, run, target_word
LIMIT $limit
