"""qgate: shared helpers for the quality-gate pipeline stages (params, I/O, datasets, evaluator)."""
