-- Quarantined inputs (inputs that could not become episodes) by error type and source. The 15 most frequent
-- error types keep their own bar; the rest are summed as "other".
WITH c AS (
    SELECT error_type, source, count(*) AS n FROM quarantine GROUP BY ALL
), top AS (
    SELECT error_type, row_number() OVER (ORDER BY sum(n) DESC, error_type) AS rank
    FROM c GROUP BY error_type
    QUALIFY rank <= 15
)
SELECT coalesce(top.error_type, 'other') AS error_type,
       c.source,
       sum(c.n)                          AS inputs,
       min(coalesce(top.rank, 99))       AS rank
FROM c LEFT JOIN top USING (error_type)
GROUP BY ALL
ORDER BY rank, c.source
