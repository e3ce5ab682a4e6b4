"""Executors: anything that runs one plan step (an LLM, a tool, the simulator)."""

from easy_core.core.schemas import StepRequest
from easy_core.executors.base import Executor
from easy_core.executors.pool import CostLedger, ExecutorPool, PoolSession

__all__ = ["CostLedger", "Executor", "ExecutorPool", "PoolSession", "StepRequest"]
