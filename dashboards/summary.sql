-- The header strip: the latest round with numbers, pile sizes and totals. One row, even on an empty lake.
WITH latest AS (
    SELECT * FROM rounds
    WHERE pass_rate IS NOT NULL OR eval_pass_rate IS NOT NULL
    ORDER BY round DESC
    LIMIT 1
)
SELECT
    (SELECT max(round) FROM rounds)      AS latest_round,
    l.round                              AS measured_round,
    l.pass_rate, l.pass_rate_lo, l.pass_rate_hi, l.n_new,
    l.eval_pass_rate, l.eval_pass_rate_lo, l.eval_pass_rate_hi, l.eval_n,
    (SELECT count(*) FROM sft_thin)      AS sft_size,
    (SELECT count(*) FROM ct_thin)       AS ct_size,
    (SELECT count(*) FROM episodes)      AS episodes,
    (SELECT count(*) FROM quarantine)    AS quarantined
FROM (SELECT 1) AS one
LEFT JOIN latest AS l ON true
