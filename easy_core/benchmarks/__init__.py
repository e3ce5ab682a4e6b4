"""The drivers behind `easy bench`; their figures are recorded in docs/BENCHMARKS.md."""
