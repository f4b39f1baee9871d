-- Each round's RL mode (rounds.breakdown $.rl): joint, or its specialists (name, world, weight in the merge, the
-- checkpoint each reached) and the merged checkpoint.
WITH b AS (
    SELECT round, CAST(breakdown AS JSON) AS j
    FROM rounds
    WHERE breakdown IS NOT NULL AND json_valid(breakdown) AND json_type(CAST(breakdown AS JSON), '$.rl') = 'OBJECT'
), s AS (
    SELECT round, j,
           unnest(CASE WHEN json_type(j, '$.rl.specialists') = 'ARRAY'
                       THEN CAST(json_extract(j, '$.rl.specialists') AS JSON[]) ELSE [NULL::JSON] END) AS s
    FROM b
), rows AS (
    SELECT round,
           j ->> '$.rl.mode' AS mode,
           s ->> 'name'      AS specialist,
           CASE WHEN s IS NULL THEN NULL
                ELSE coalesce(s ->> 'env', '') || ': '
                     || coalesce(array_to_string(CAST(json_extract(s, '$.families') AS VARCHAR[]), ', '), 'all tasks')
                     || coalesce(' (levels ' || array_to_string(CAST(json_extract(s, '$.levels') AS VARCHAR[]), ', ')
                                 || ')', '')
           END               AS world,
           TRY_CAST(json_extract(j, '$.rl.merge.alphas."' || (s ->> 'name') || '"') AS DOUBLE) AS alpha,
           coalesce(s ->> 'checkpoint', j ->> '$.rl.checkpoint') AS checkpoint
    FROM s
    UNION ALL
    SELECT round, 'specialists', 'merged', NULL, NULL, j ->> '$.rl.merge.checkpoint'
    FROM b
    WHERE j ->> '$.rl.mode' = 'specialists'
)
SELECT * FROM rows
ORDER BY round DESC, specialist = 'merged', specialist
