"""The statistics of finished training runs: Table 1, its tests and intervals, the claims, the authors' logs."""
