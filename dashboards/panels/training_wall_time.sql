-- Wall time of the training jobs per round and stage.
SELECT round, upper(stage) AS stage, sum(wall_s) AS wall_s
FROM training_runs
WHERE wall_s IS NOT NULL
GROUP BY round, stage
ORDER BY round, CASE stage WHEN 'ct' THEN 1 WHEN 'sft' THEN 2 WHEN 'rl' THEN 3 ELSE 4 END
