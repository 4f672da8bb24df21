"""How a pydantic field of a tool's arguments is keyed: a model (or a client) may give it under
its name, its alias or a validation alias, and the tool's own validation reads it by one key.
Arguments are stored, shown and run under that key, and looked up under any of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def read_as(name: str, field: Any, config: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys a model's validation reads a field by: its validation alias (the first of its
    choices that is a key, else the first path of keys), else its name."""
    if config.get("validate_by_alias", True):
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        options = choices if choices is not None else [alias]
        for option in options:
            if isinstance(option, str):
                return (option,)
        for option in options:
            path = getattr(option, "path", None)
            if path and all(isinstance(step, str) for step in path):
                return tuple(path)
    return (name,)


def names_of(name: str, field: Any) -> list[str]:
    """Every key a model may give a field under, as written: its name, its alias, each
    validation alias (the first step of an `AliasPath`), so that a secret given under any of
    them is found in the arguments as written (helper-69: `api_key` beside `alias="apiKey"`)."""
    names = [name, *([field.alias] if field.alias else [])]
    choices = getattr(field.validation_alias, "choices", None)
    for alias in choices if choices is not None else [field.validation_alias]:
        path = getattr(alias, "path", None)
        first = path[0] if path else alias
        if isinstance(first, str):
            names.append(first)
    return list(dict.fromkeys(names))
