-- Held-out evaluation pass rate per difficulty level and round, from rounds.breakdown (JSON). The per-level object
-- is read from $.eval.by_level (or $.eval.level, or $.eval_by_level); each level is either
-- {"n": .., "n_pass": .., "pass_rate": .., "lo": .., "hi": ..} (any of pass_rate/lo/hi may be missing) or a bare rate.
WITH b AS (
    SELECT round, CAST(breakdown AS JSON) AS j
    FROM rounds
    WHERE breakdown IS NOT NULL AND json_valid(breakdown)
), o AS (
    SELECT round,
           coalesce(CASE WHEN json_type(j, '$.eval.by_level') = 'OBJECT' THEN json_extract(j, '$.eval.by_level') END,
                    CASE WHEN json_type(j, '$.eval.level') = 'OBJECT' THEN json_extract(j, '$.eval.level') END,
                    CASE WHEN json_type(j, '$.eval_by_level') = 'OBJECT' THEN json_extract(j, '$.eval_by_level') END) AS o
    FROM b
), v AS (
    SELECT round, level, json_extract(o, '$."' || level || '"') AS v
    FROM (SELECT round, o, unnest(json_keys(o)) AS level FROM o WHERE o IS NOT NULL)
)
SELECT round,
       'level ' || level AS level,
       CASE WHEN json_type(v) = 'OBJECT' THEN TRY_CAST(v ->> 'pass_rate' AS DOUBLE)
            ELSE TRY_CAST(CAST(v AS VARCHAR) AS DOUBLE) END                        AS rate,
       TRY_CAST(v ->> 'lo' AS DOUBLE)                                              AS lo,
       TRY_CAST(v ->> 'hi' AS DOUBLE)                                              AS hi,
       coalesce(TRY_CAST(v ->> 'n_pass' AS DOUBLE),
                round(TRY_CAST(v ->> 'pass_rate' AS DOUBLE) * TRY_CAST(v ->> 'n' AS DOUBLE))) AS k,
       TRY_CAST(v ->> 'n' AS DOUBLE)                                               AS n
FROM v
ORDER BY TRY_CAST(level AS INTEGER) NULLS LAST, level, round
