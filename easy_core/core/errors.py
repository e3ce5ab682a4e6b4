"""Typed errors. Every error a user can cause names the problem and, where there is one, the fix.

The CLI turns any `EasyError` into its message on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations


class EasyError(Exception):
    """Base of every error this library raises on purpose."""


class ConfigError(EasyError):
    """A pool YAML, params.yaml or other config file is missing or invalid."""


class PlanError(EasyError):
    """An orchestrator plan cannot be executed. `code` is a stable, machine-readable kind."""

    code = "invalid_plan"


class PlanParseError(PlanError):
    code = "not_json"


class PlanSchemaError(PlanError):
    code = "wrong_types"


class EmptyPlanError(PlanError):
    code = "empty_plan"


class DuplicateStepError(PlanError):
    code = "duplicate_step"


class SelfDependencyError(PlanError):
    code = "self_dependency"


class UnknownDependencyError(PlanError):
    code = "unknown_dependency"


class UnknownExecutorError(PlanError):
    code = "unknown_executor"


class UnknownPlaceholderError(PlanError):
    code = "unknown_placeholder"


class PlanCycleError(PlanError):
    code = "cycle"

    def __init__(self, message: str, cycle: list[str]):
        super().__init__(message)
        self.cycle = cycle


class PlanTooLargeError(PlanError):
    code = "too_many_steps"


class UnknownSubtaskError(PlanError):
    code = "unknown_subtask"


class PolicyError(EasyError):
    """A policy cannot act in this setting (for example `oracle` outside the sim suite)."""
