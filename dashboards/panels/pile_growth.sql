-- Pile sizes after each round (rounds.sft_size / ct_size): SFT grows with passes, CT with failures.
SELECT round, 'SFT (passed)' AS pile, sft_size AS episodes FROM rounds WHERE sft_size IS NOT NULL
UNION ALL
SELECT round, 'CT (failed)', ct_size FROM rounds WHERE ct_size IS NOT NULL
ORDER BY pile DESC, round
