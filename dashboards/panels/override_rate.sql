-- Interactive annotation: share of the model's proposals that annotators overrode, per round (weighted by
-- actions over landed interactive sessions). It should fall as the model improves. Wilson 95% from k of n.
SELECT round,
       CAST(round(sum(override_rate * n_actions)) AS BIGINT) AS k,
       sum(n_actions)                                        AS n,
       count(*)                                              AS sessions
FROM sessions
WHERE source = 'interactive' AND status = 'landed' AND round IS NOT NULL
  AND override_rate IS NOT NULL AND n_actions > 0
GROUP BY round
ORDER BY round
