"""Client keys: read from the environment (`EASY_API_KEYS`, comma-separated) or handed in by
the caller (the Prefect flow reads a Secret block); compared in constant time; never logged."""

from __future__ import annotations

import hmac
import os

KEYS_ENV = "EASY_API_KEYS"


def keys_from_env(name: str = KEYS_ENV) -> list[str]:
    return [key.strip() for key in os.environ.get(name, "").split(",") if key.strip()]


def authorized(header: str | None, keys: list[str]) -> bool:
    """Whether an `Authorization: Bearer KEY` header carries one of `keys`. Every key is
    compared, each in constant time, so the time taken says nothing about which key is close."""
    if header is None or not header.startswith("Bearer "):
        return False
    given = header[len("Bearer ") :].strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key.encode())
    return matched
