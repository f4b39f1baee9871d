-- Audited precision of the SFT pile per round: the share of audited passed episodes a person judged good.
-- Audits are append-only; the latest verdict per (round, episode) counts. Wilson 95% intervals from k of n.
WITH latest AS (
    SELECT round, episode_id, verdict
    FROM audits
    QUALIFY row_number() OVER (PARTITION BY round, episode_id ORDER BY recorded_at DESC, audit_id) = 1
)
SELECT round,
       count(*) FILTER (WHERE verdict = 'good') AS k,
       count(*)                                 AS n
FROM latest
GROUP BY round
ORDER BY round
