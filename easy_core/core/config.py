"""Loading YAML config files (params.yaml, pool files) into pydantic models with errors that
name the file, the field and what was expected."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from easy_core.core.errors import ConfigError

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


def load_yaml_model(path: str | Path, model: type[M], overrides: Sequence[str] = ()) -> M:
    """The file as `model`, with `section.field=value` overrides (values read as YAML) on top."""
    return validate_model(load_yaml_mapping(path), model, str(path), overrides)


def load_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The file's top-level mapping, or a ConfigError naming the file and what is wrong."""
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
    return data


def validate_model(
    data: dict[str, Any], model: type[M], source: str, overrides: Sequence[str] = ()
) -> M:
    for assignment in overrides:
        set_dotted(data, assignment)
    where = source + (f" with --set {' '.join(overrides)}" if overrides else "")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{where}: invalid {model.__name__}:\n{describe_validation_error(exc)}"
        ) from None


def set_dotted(data: dict[str, Any], assignment: str) -> None:
    """Apply one `section.field=value` assignment to a nested mapping, the value read as YAML
    (`sft.max_steps=40`, `grpo.base_model=models/sft-280`, `eval.pools=[a.yaml, b.yaml]`)."""
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(
            f"--set {assignment!r}: expected section.field=value, e.g. --set sft.max_steps=40"
        )
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"--set {assignment!r}: {'.'.join(parts[: depth + 1])} is a value, not a section"
            )
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {assignment!r}: the value is not valid YAML: {exc}") from None
