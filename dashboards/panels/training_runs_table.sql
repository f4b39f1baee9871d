-- One row per training job: what it trained on, how far the loss went, and what it cost.
SELECT round,
       upper(stage) AS stage,
       backend,
       samples,
       tokens,
       steps,
       loss_first,
       loss_last,
       wall_s,
       output_checkpoint
FROM training_runs
ORDER BY round DESC, CASE stage WHEN 'ct' THEN 1 WHEN 'sft' THEN 2 WHEN 'rl' THEN 3 ELSE 4 END, started_at DESC
