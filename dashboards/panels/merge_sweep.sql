-- The latest merge sweep (`flywheel merge --sweep`): each world's held-out pass rate along alpha (the first
-- specialist's weight; alpha = 1 is that specialist, alpha = 0 the other), with the common base as a flat line.
WITH last AS (
    SELECT CAST(json_extract(metrics, '$.sweep') AS JSON) AS s FROM training_runs
    WHERE stage = 'merge' AND metrics IS NOT NULL AND json_extract(metrics, '$.sweep') IS NOT NULL
    ORDER BY started_at DESC, run_id LIMIT 1
), pts AS (
    SELECT unnest(CAST(json_extract(s, '$.points') AS JSON[])) AS p, s FROM last
), merged AS (
    SELECT CAST(p ->> 'alpha' AS DOUBLE) AS alpha, w AS world, json_extract(p, '$.rates."' || w || '"') AS r,
           'merge' AS line
    FROM (SELECT p, unnest(json_keys(json_extract(p, '$.rates'))) AS w FROM pts)
), base AS (
    SELECT m.alpha, m.world, json_extract(l.s, '$.base."' || m.world || '"') AS r, 'base' AS line
    FROM merged m CROSS JOIN last l
)
SELECT world, line, alpha, CAST(r ->> 'rate' AS DOUBLE) AS rate, CAST(r ->> 'lo' AS DOUBLE) AS lo,
       CAST(r ->> 'hi' AS DOUBLE) AS hi, CAST(r ->> 'k' AS DOUBLE) AS k, CAST(r ->> 'n' AS DOUBLE) AS n
FROM (SELECT * FROM merged UNION ALL SELECT * FROM base)
ORDER BY world, line DESC, alpha
