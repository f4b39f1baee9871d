-- Tokens trained per round and stage (all jobs of the round).
SELECT round, upper(stage) AS stage, sum(tokens) AS tokens
FROM training_runs
WHERE tokens IS NOT NULL
GROUP BY round, stage
ORDER BY round, CASE stage WHEN 'ct' THEN 1 WHEN 'sft' THEN 2 WHEN 'rl' THEN 3 ELSE 4 END
