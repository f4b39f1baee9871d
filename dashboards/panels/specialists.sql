-- Rounds that ended with specialists + merge (RoundConfig.rl_mode = "specialists"): the merged model on the mixed
-- held-out set, per part (each specialist's world, the composed two-world tasks where the sandbox composes them) and
-- overall, with 95% intervals (rounds.breakdown $.mixed.rates, written by the round's evaluate stage).
WITH b AS (
    SELECT round, CAST(breakdown AS JSON) AS j
    FROM rounds
    WHERE breakdown IS NOT NULL AND json_valid(breakdown)
      AND json_type(CAST(breakdown AS JSON), '$.mixed.rates') = 'OBJECT'
), p AS (
    SELECT round, j, unnest(json_keys(json_extract(j, '$.mixed.rates'))) AS part FROM b
), r AS (
    SELECT round, part, json_extract(j, '$.mixed.rates."' || part || '"') AS v FROM p
)
SELECT round,
       part,
       TRY_CAST(v ->> 'rate' AS DOUBLE) AS rate,
       TRY_CAST(v ->> 'lo' AS DOUBLE)   AS lo,
       TRY_CAST(v ->> 'hi' AS DOUBLE)   AS hi,
       TRY_CAST(v ->> 'k' AS DOUBLE)    AS k,
       TRY_CAST(v ->> 'n' AS DOUBLE)    AS n
FROM r
ORDER BY CASE part WHEN 'overall' THEN 2 WHEN 'composed' THEN 1 ELSE 0 END, part, round
