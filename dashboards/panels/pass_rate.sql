-- Pass rate per round: the new samples' P(V=1 | r) and the held-out evaluation pass rate, each with its 95% interval.
-- k of n are returned so a missing stored interval can be filled (Wilson); stored rates and intervals win.
SELECT round,
       'new samples P(V=1|r)' AS series,
       pass_rate              AS rate,
       pass_rate_lo           AS lo,
       pass_rate_hi           AS hi,
       n_pass                 AS k,
       n_new                  AS n
FROM rounds
WHERE pass_rate IS NOT NULL OR n_new > 0
UNION ALL
SELECT round,
       'held-out eval',
       eval_pass_rate,
       eval_pass_rate_lo,
       eval_pass_rate_hi,
       CAST(round(eval_pass_rate * eval_n) AS BIGINT),
       eval_n
FROM rounds
WHERE eval_pass_rate IS NOT NULL
ORDER BY series DESC, round
