"""Benchmarks: the prompt suite, timed runs, the fitted cost model, reports, plain-vs-speculative comparison, plots."""
