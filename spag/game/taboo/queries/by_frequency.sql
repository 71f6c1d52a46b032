-- Outcomes by word-frequency band per epoch: are rare target words harder than common ones?
--
-- Bands come from wordfreq's Zipf frequency of the target word (the `words` table, built for the
-- distinct target words): very common (zipf >= 5), common (4-5), uncommon (3-4), rare (< 3).
-- Each rate is that outcome's share of the band's games; the four rates sum to 1. `words` counts the
-- distinct target words of the band that were played in the run.
WITH per_word AS (
    -- Aggregate per word first: the join with `words` then touches one row per word, not per game.
    SELECT
        run,
        epoch,
        target_word,
        count(*) AS games,
        count(*) FILTER (WHERE outcome = 'attacker_wins') AS attacker_wins,
        count(*) FILTER (WHERE outcome = 'defender_wins') AS defender_wins,
        count(*) FILTER (WHERE outcome = 'tie') AS ties,
        count(*) FILTER (WHERE outcome = 'attacker_breaks_rules') AS fouls
    FROM episodes
    GROUP BY run, epoch, target_word
)
SELECT
    p.run,
    p.epoch,
    w.band,
    count(*) AS words,
    sum(p.games)::BIGINT AS games,
    rate(sum(p.attacker_wins), sum(p.games)) AS attacker_win_rate,
    rate(sum(p.defender_wins), sum(p.games)) AS defender_win_rate,
    rate(sum(p.ties), sum(p.games)) AS tie_rate,
    rate(sum(p.fouls), sum(p.games)) AS foul_rate
FROM per_word p
JOIN words w USING (target_word)
GROUP BY p.run, p.epoch, w.band, w.band_order
ORDER BY p.epoch NULLS FIRST, p.run, w.band_order
