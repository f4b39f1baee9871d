-- Think-aloud quality per annotator group, with session and action counts.
SELECT coalesce("group", 'unknown')                                                   AS annotator_group,
       count(*)                                                                       AS sessions,
       sum(n_actions)                                                                 AS actions,
       sum(speech_s)                                                                  AS speech_s,
       sum(asr_confidence * coalesce(speech_s, 1.0))
           / sum(coalesce(speech_s, 1.0)) FILTER (WHERE asr_confidence IS NOT NULL)   AS asr_confidence,
       sum(thought_share * coalesce(n_actions, 1))
           / sum(coalesce(n_actions, 1)) FILTER (WHERE thought_share IS NOT NULL)     AS thought_share
FROM sessions
WHERE source = 'think_aloud' AND status = 'landed'
GROUP BY ALL
ORDER BY annotator_group
