-- Great Expectations results per round and suite: runs, failed runs, failed expectations, overrides.
SELECT round,
       suite,
       count(*)                                AS runs,
       count(*) FILTER (WHERE NOT success)     AS failed_runs,
       sum(n_failed)                           AS expectations_failed,
       sum(n_expectations)                     AS expectations,
       count(*) FILTER (WHERE overridden)      AS overridden
FROM dq_results
GROUP BY round, suite
ORDER BY round DESC, suite
