"""Thin Prefect flows over easy_core, one file per pipeline stage (docs/ARCHITECTURE.md)."""
