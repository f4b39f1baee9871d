-- New-sample pass rate per difficulty level and round, counted from the piles: every routed episode is in
-- exactly one of sft (passed) and ct (failed). Intervals are Wilson 95%, filled in by the dashboard from k of n.
WITH routed AS (
    SELECT round, difficulty, 1 AS passed FROM sft_thin
    UNION ALL
    SELECT round, difficulty, 0 AS passed FROM ct_thin
)
SELECT round,
       'level ' || difficulty AS level,
       sum(passed)            AS k,
       count(*)               AS n
FROM routed
WHERE difficulty IS NOT NULL
GROUP BY round, difficulty
ORDER BY difficulty, round
