-- Training loss curves per stage for the 6 most recent rounds (the latest run of each round and stage).
-- Long curves are thinned to about 200 points per run; the first and last points are always kept.
WITH recent AS (
    SELECT DISTINCT round FROM training_runs ORDER BY round DESC LIMIT 6
), runs AS (
    SELECT round, stage, losses, len(losses) AS n
    FROM training_runs
    WHERE round IN (SELECT round FROM recent) AND len(losses) > 0
    QUALIFY row_number() OVER (PARTITION BY round, stage ORDER BY started_at DESC, run_id) = 1
), pts AS (
    SELECT round, stage, n, unnest(losses) AS loss, unnest(range(1, n + 1)) AS step FROM runs
)
SELECT upper(stage) AS stage, 'round ' || round AS run, step, loss
FROM pts
WHERE n <= 200 OR step % (n // 200 + 1) = 0 OR step = 1 OR step = n
ORDER BY CASE stage WHEN 'ct' THEN 1 WHEN 'sft' THEN 2 WHEN 'rl' THEN 3 ELSE 4 END, stage, round, step
