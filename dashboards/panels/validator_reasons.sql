-- Failing verdicts per reason code and round (validator: reason). The 8 most frequent reasons overall keep
-- their own series; the rest are summed as "other".
WITH f AS (
    SELECT round, validator || ': ' || reason AS reason, count(*) AS n
    FROM verdicts
    WHERE NOT passed
    GROUP BY ALL
), top AS (
    SELECT reason, row_number() OVER (ORDER BY sum(n) DESC, reason) AS rank
    FROM f
    GROUP BY reason
    QUALIFY rank <= 8
)
SELECT f.round,
       coalesce(top.reason, 'other') AS reason,
       sum(f.n)                      AS failures,
       min(coalesce(top.rank, 99))   AS rank
FROM f LEFT JOIN top USING (reason)
GROUP BY ALL
ORDER BY rank, f.round
