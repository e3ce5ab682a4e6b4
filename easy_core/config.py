"""Loading YAML config files (params.yaml, pool files) into pydantic models with errors that
name the file, the field and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from easy_core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem: `field.path: message (got VALUE)`."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        got = item.get("input")
        got_text = "" if isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"  {where}: {item['msg']}{got_text}")
    return "\n".join(lines)


def load_yaml_model(path: str | Path, model: type[M]) -> M:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid {model.__name__}:\n{describe_validation_error(exc)}"
        ) from None
