"""Contracts and foundations every layer shares: schemas, params, errors, config, storage,
stats, clocks, the capability curve and the reward. Imports nothing else of easy
(docs/ARCHITECTURE.md)."""
