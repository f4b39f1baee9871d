-- Think-aloud quality per annotator group: ASR confidence (weighted by speech seconds) and the share of actions
-- that carry a thought (weighted by actions), over landed think-aloud sessions.
WITH s AS (
    SELECT coalesce("group", 'unknown') AS annotator_group,
           asr_confidence,
           thought_share,
           coalesce(speech_s, 1.0)  AS speech_w,
           coalesce(n_actions, 1)   AS action_w
    FROM sessions
    WHERE source = 'think_aloud' AND status = 'landed'
)
SELECT annotator_group, 'ASR confidence' AS metric,
       sum(asr_confidence * speech_w) / sum(speech_w) FILTER (WHERE asr_confidence IS NOT NULL) AS value
FROM s GROUP BY annotator_group
UNION ALL
SELECT annotator_group, 'actions with a thought',
       sum(thought_share * action_w) / sum(action_w) FILTER (WHERE thought_share IS NOT NULL)
FROM s GROUP BY annotator_group
ORDER BY annotator_group, metric
