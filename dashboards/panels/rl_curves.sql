-- RL practice curves, one point per update (iteration) of the latest RL run of each of the 6 most recent rounds:
-- reward, pass rate and entropy side by side first (a rising reward with a collapsing entropy is falling apart),
-- then what says why: clipped shares (low and high side), KL to the policy that wrote the data, the share of
-- all-equal groups, value loss, episode age, steps per episode and generation tokens/s.
WITH recent AS (
    SELECT DISTINCT round FROM training_runs WHERE stage = 'rl' ORDER BY round DESC LIMIT 6
), runs AS (
    SELECT round, metrics FROM training_runs
    WHERE stage = 'rl' AND round IN (SELECT round FROM recent) AND metrics IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY round ORDER BY started_at DESC, run_id) = 1
), its AS (
    SELECT round, unnest(CAST(json_extract(metrics, '$.iterations') AS JSON[])) AS it FROM runs
), m(metric, key, o) AS (
    VALUES ('reward', 'reward_mean', 1), ('pass rate', 'pass_rate', 2), ('entropy', 'entropy', 3),
           ('clipped, low side', 'clip_low', 4), ('clipped, high side', 'clip_high', 5), ('KL to behaviour', 'kl', 6),
           ('all-equal groups', 'all_equal_share', 7), ('value loss', 'value_loss', 8), ('episode age', 'age_mean', 9),
           ('steps per episode', 'steps_per_episode', 10), ('generation tok/s', 'gen_tokens_per_s', 11)
)
SELECT metric, 'round ' || round AS run, CAST(json_extract_string(it, '$.iter') AS INTEGER) + 1 AS iteration,
       CAST(json_extract_string(it, '$.' || key) AS DOUBLE) AS value
FROM its CROSS JOIN m
WHERE json_extract_string(it, '$.' || key) IS NOT NULL
ORDER BY o, round, iteration
