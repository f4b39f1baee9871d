-- New episodes per round by source (think-aloud, interactive annotation, rollouts).
SELECT round, source, count(*) AS episodes
FROM episodes
GROUP BY round, source
ORDER BY round, source
