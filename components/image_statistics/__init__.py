"""ImageStatistics: exact pixel statistics, distributions, duplicates and leakage of
an `Examples` artifact, a report with pictures, and a gate before training."""
