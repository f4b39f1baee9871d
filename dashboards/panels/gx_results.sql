-- Great Expectations suite runs per round and outcome. A failed suite stops routing its batch unless overridden.
SELECT round,
       CASE WHEN success THEN 'passed'
            WHEN overridden THEN 'failed, overridden'
            ELSE 'failed, batch stopped' END AS outcome,
       count(*) AS suite_runs
FROM dq_results
GROUP BY ALL
ORDER BY round, outcome DESC
