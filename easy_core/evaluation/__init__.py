"""Measuring policies and executors: evaluation, paired comparisons, profiling, calibration,
plan validity, reports and plots."""
