-- Where each round's time goes: seconds per stage from rounds.stage_status
-- (JSON: stage -> {status, started_at, finished_at, seconds}), stages in the order the round recorded them.
WITH s AS (
    SELECT round, CAST(stage_status AS JSON) AS j
    FROM rounds
    WHERE stage_status IS NOT NULL AND json_valid(stage_status) AND json_type(stage_status) = 'OBJECT'
), k AS (
    SELECT round, j, unnest(json_keys(j)) AS stage, unnest(range(CAST(len(json_keys(j)) AS BIGINT))) AS i
    FROM s
)
SELECT round,
       stage,
       TRY_CAST(json_extract_string(j, '$."' || stage || '".seconds') AS DOUBLE) AS seconds,
       json_extract_string(j, '$."' || stage || '".status')                      AS status
FROM k
ORDER BY i, round
