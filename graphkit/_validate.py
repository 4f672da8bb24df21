"""Tool arguments and resume data as the tool's own models read them: validated once, stored
as JSON (secrets revealed to the tool, never masked), and refused when they could not be
stored or would change if read again. Every door that judges arguments reads them so."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import UnionType
from typing import Any, Union, get_args, get_origin

import jsonschema
from langchain_core.tools import BaseTool
from langchain_core.tools.base import get_all_basemodel_annotations
from pydantic import BaseModel, Secret, SecretBytes, SecretStr, ValidationError
from pydantic.v1 import BaseModel as BaseModelV1
from pydantic_core import to_jsonable_python

from graphkit._fields import names_of, read_as
from graphkit._limits import check_value, storable
from graphkit._secrets import MASK, secret_paths, secret_values
from graphkit.errors import GraphkitError, InvalidApprovedArgsError, ResumeDataError
from graphkit.tools import GraphkitTool

__all__ = ["args_json_schema", "args_model", "as_received", "declared_secret_paths",
           "declares_resume_secrets", "declares_secrets", "injected_keys", "now_iso",
           "resume_secrets", "storable", "unknown_args", "unsupported_injections",
           "unwritten_fields", "validate_args", "validate_resume", "validation_runs_code"]


def iso_time(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_iso() -> str:
    """Now, as every timestamp graphkit writes: ISO 8601, milliseconds, UTC with Z."""
    return iso_time(datetime.now(UTC))


def args_model(tool: BaseTool | None) -> type[BaseModel] | None:
    """The tool's pydantic model of the arguments a call gives; None for a JSON schema, or
    none (the arguments are then taken as they are). Without LangChain's injected ones (a
    `tool_call_id: Annotated[str, InjectedToolCallId]`): the model never gives them (every
    call of such a tool was refused for want of one), and one it writes is dropped, never
    shown, digested or run (LangChain fills it in as the tool runs: helper-113, helper-114)."""
    if tool is None:
        return None
    schema = tool.tool_call_schema if injected_keys(tool) else tool.args_schema
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def injected_keys(tool: BaseTool) -> frozenset[str]:
    """The arguments LangChain injects into the tool, which no call gives: declared in its
    function's signature, or in an explicit `args_schema` (LangChain's own set misses
    those; an `InjectedState` there was left to the model: helper-116)."""
    keys: Any = getattr(tool, "_injected_args_keys", frozenset())
    found = frozenset(keys) if isinstance(keys, frozenset | set) else frozenset()
    schema = tool.args_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel | BaseModelV1):
        found |= _injected_fields(schema)  # (pydantic's v1 API too: helper-117)
    return found


@functools.lru_cache(maxsize=1024)
def _injected_fields(schema: type[Any]) -> frozenset[str]:
    from langchain_core.tools.base import _is_injected_arg_type

    return frozenset(name for name, annotation in get_all_basemodel_annotations(schema).items()
                     if _is_injected_arg_type(annotation))


def unsupported_injections(tool: BaseTool) -> list[str]:
    """The tool's injected arguments that nothing fills in under graphkit (LangGraph's
    `InjectedState`, `InjectedStore`, `ToolRuntime`, a bare `InjectedToolArg`): only a
    `tool_call_id` is (LangChain's `InjectedToolCallId`, from the call). Given by the model
    instead, a state or a user id it made up reached the tool (helper-113)."""
    keys = injected_keys(tool)
    if not keys:
        return []
    from langchain_core.tools.base import InjectedToolCallId, _is_injected_arg_type

    annotations = get_all_basemodel_annotations(tool.get_input_schema())
    return sorted(k for k in keys if k not in annotations or not _is_injected_arg_type(
        annotations[k], injected_type=InjectedToolCallId))


def unwritten_fields(tool: BaseTool) -> list[str]:
    """The fields of the tool's argument schema that pydantic leaves out when it writes the
    arguments (`Field(exclude=True)`, `exclude_if`, at any depth), writes in a form it does
    not read back (`ser_json_bytes` other than `val_json_bytes`), or writes under another key
    than their name (`serialize_by_alias`, at the top: LangChain's tool keeps the fields its
    dump writes under a key it was given or a field's name). Arguments are shown, decided and
    run as written: such a field the model gave was dropped, seen by no predicate nor
    reviewer, and the tool ran its default (production for staging: helper-122)."""
    schema = args_model(tool)
    if schema is None:
        return []
    found = _unwritten(getattr(schema, "__pydantic_core_schema__", None), "")
    if schema.model_config.get("serialize_by_alias"):
        found |= {name for name, info in schema.model_fields.items()
                  if (info.serialization_alias or info.alias or name) != name}
    return sorted(found)


def _unwritten(node: Any, name: str) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if node.get("serialization_exclude") or node.get("serialization_exclude_if"):
            found.add(name)
        if node.get("ser_json_bytes", "utf8") != node.get("val_json_bytes", "utf8"):
            found.add(name or "(its bytes)")  # (written as base64, read back as that text)
        fields = node.get("fields") if node.get("type") in _WITH_FIELDS else None
        for key, value in node.items():
            if key == "fields" and isinstance(fields, dict):
                for field, spec in fields.items():
                    found |= _unwritten(spec, str(field))
            elif key == "fields" and isinstance(fields, list):  # (a dataclass's args)
                for spec in fields:
                    found |= _unwritten(spec, str(spec.get("name", "?"))
                                        if isinstance(spec, dict) else name)
            else:
                found |= _unwritten(value, name)
    elif isinstance(node, list | tuple):
        for value in node:
            found |= _unwritten(value, name)
    return found


_WITH_FIELDS = frozenset({"model-fields", "typed-dict", "dataclass-args"})


def validation_runs_code(tool: BaseTool) -> bool:
    """Whether parsing the tool's arguments (`validate_args`) may run the application's code:
    a validator, serializer, default factory or custom type in its pydantic schema."""
    schema = args_model(tool)
    return schema is not None and _schema_runs_code(schema)


@functools.lru_cache(maxsize=1024)
def _schema_runs_code(schema: type[BaseModel]) -> bool:
    return _has_code(getattr(schema, "__pydantic_core_schema__", None))


def _has_code(node: Any) -> bool:
    if isinstance(node, dict):
        if (str(node.get("type", "")).startswith("function-")
                or node.get("default_factory") is not None or node.get("missing") is not None
                or node.get("post_init") or node.get("custom_init")):
            return True
        return any(_has_code(value) for value in node.values())
    if isinstance(node, list | tuple):
        return any(_has_code(value) for value in node)
    return False


_SECRETS = (SecretStr, SecretBytes, Secret)
_MASK = MASK
"""What pydantic writes for a non-empty secret in a JSON dump."""


def _masked(dumped: Any) -> bool:
    """Whether a JSON dump holds pydantic's mask (a secret, or a value that looks like one:
    revealing then finds nothing to change)."""
    if isinstance(dumped, str):
        return dumped == _MASK
    if isinstance(dumped, dict):
        return any(_masked(v) for v in dumped.values())
    if isinstance(dumped, list):
        return any(_masked(v) for v in dumped)
    return False


def _plain(python: Any) -> Any:
    """A Python-mode value with every secret replaced by what it holds."""
    if isinstance(python, _SECRETS):
        return _plain(python.get_secret_value())
    if isinstance(python, Mapping):
        return {k: _plain(v) for k, v in python.items()}
    if isinstance(python, list | tuple | set | frozenset):
        return [_plain(v) for v in python]
    return python


def _revealed(python: Any, dumped: Any) -> Any:
    """`dumped` (a JSON dump, where pydantic masks secrets as '**********') with each secret
    of `python` (the same model dumped in Python mode) given as its value: the tool must run
    with the value the model sent, and reviewers judge that value (the model's own message
    holds it in the clear anyway). Where the two dumps do not line up, `dumped` stays as it
    is (and a masked value is then refused as unstable, never run)."""
    if isinstance(python, _SECRETS):
        return to_jsonable_python(_plain(python), by_alias=True)
    if isinstance(python, Mapping) and isinstance(dumped, dict):
        pairs = list(zip(python.items(), dumped.items(), strict=False))
        if len(python) == len(dumped) and all(jk in (pk, str(pk)) for (pk, _), (jk, _) in pairs):
            return {jk: _revealed(pv, jv) for (_, pv), (jk, jv) in pairs}
        return {k: _revealed(python[k], v) if k in python else v for k, v in dumped.items()}
    if isinstance(python, set | frozenset) and isinstance(dumped, list):
        # unordered: each member as it is, in the set's own order (the tool gets a set again)
        return to_jsonable_python(_plain(python), by_alias=True)
    if (isinstance(python, list | tuple) and isinstance(dumped, list)
            and len(python) == len(dumped)):
        return [_revealed(p, d) for p, d in zip(python, dumped, strict=True)]
    return dumped


def validate_args(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """`validated_args` without the secret paths."""
    return validated_args(tool, args)[0]


def validated_args(tool: BaseTool, args: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], list[list[str | int]]]:
    """Parse `args` with the tool's schema; raises `InvalidApprovedArgsError` when they fail.

    The result is exactly what runs, is shown and is digested: the validated fields only
    (extra keys a permissive schema lets through are dropped), as JSON.
    """
    if not isinstance(args, Mapping):
        msg = f"arguments for tool {tool.name!r} must be an object, got {type(args).__name__}"
        raise InvalidApprovedArgsError(msg)
    check_value(args, what=f"arguments for tool {tool.name!r}", error=InvalidApprovedArgsError)
    schema = args_model(tool)
    if schema is None:  # (taken as they are, but an injected argument's: no call gives one)
        hidden = injected_keys(tool)
        args = {k: v for k, v in args.items() if k not in hidden} if hidden else args
        storable(dict(args), f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
        return dict(args), []
    parsed, result, secrets = _parsed(tool, schema, args)
    # (what the schema made of them: the text "nan" is a float NaN to pydantic; helper-79)
    check_value(result, what=f"arguments for tool {tool.name!r}", error=InvalidApprovedArgsError)
    storable(result, f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
    if validation_runs_code(tool):
        # The tool parses what it is given once more: it must get the values shown, decided
        # and digested (not a validator's second conversion, say dollars to cents again).
        again, shown_again, _ = _parsed(tool, schema, result)
        if again != parsed:
            # (which arguments, never their values: they may be secrets; helper-78)
            moved = sorted(str(k) for k in {*result, *shown_again}
                           if result.get(k) != shown_again.get(k))
            msg = (f"tool {tool.name!r} changes its arguments each time they are validated "
                   f"({', '.join(moved) or 'their types'} read again differ): the values "
                   "approved would not be the values it runs with; make its validators "
                   "idempotent")
            raise InvalidApprovedArgsError(msg)
    return result, secrets


def args_json_schema(tool: BaseTool) -> dict[str, Any] | None:
    """The JSON schema of the arguments the model sees, under the keys they are shown, stored
    and edited by (the keys the tool's validation reads: `read_as`), for checking edits
    without the tool (it is recorded with the plan) and for naming the arguments a tool
    takes."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return schema
    # (pydantic's, or its v1 API's)
    make = getattr(schema, "model_json_schema", None) or getattr(schema, "schema", None)
    try:
        seen = dict(make()) if make is not None else None
    except Exception:  # an exotic schema: the inbox then skips its own check
        return None
    model = args_model(tool)
    return _under_read_keys(seen, model) if seen is not None and model is not None else seen


def _under_read_keys(seen: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """LangChain names a model's fields by their names, not by the aliases its validation
    reads them by (and arguments are shown under: helper-73): an edit under the key the
    reviewer saw was refused as an argument the tool does not take. The model's own schema
    in validation mode names them by those keys."""
    aliased = _aliased_schema(model)
    if aliased is None:
        return seen
    # LangChain leaves out the injected arguments, and (by a slip of its own) the fields it
    # did not see in the model's signature, which has a validation alias there: the model is
    # not told of them, but a call that gives them shows them, and an edit may name them
    injected = set(get_all_basemodel_annotations(model)) - set(seen.get("properties") or {})
    given = aliased.get("properties") or {}
    needed = set(aliased.get("required") or [])
    out = {**aliased, "properties": {}}
    out.pop("required", None)
    for name, field in model.model_fields.items():
        if name in injected:
            continue
        path = read_as(name, field, model.model_config)
        # (pydantic names an `AliasPath`'s field by its name: it is read, and shown, nested)
        named = path[0] if len(path) == 1 else name
        if named in given:
            _nest(out, path, given[named], required=named in needed)
    out.update((key, seen[key]) for key in ("title", "description") if key in seen)
    return out


@functools.lru_cache(maxsize=256)
def _aliased_schema(model: type[BaseModel]) -> dict[str, Any] | None:
    """The model's schema by the keys its validation reads; None when no alias changes it."""
    try:
        aliased = model.model_json_schema(mode="validation")
        if aliased != model.model_json_schema(by_alias=False, mode="validation"):
            return aliased
    except Exception:  # (a schema pydantic cannot write: LangChain's is kept)
        pass
    return None


def _nest(schema: dict[str, Any], path: tuple[str, ...], value: Any, *, required: bool) -> None:
    """Put a field's schema at `path` of an object's schema, making (or copying: the model's
    schema is cached) the objects on the way."""
    for key in path[:-1]:
        _require(schema, key, required)
        found = schema["properties"].get(key)
        inner = {"type": "object", **(found if isinstance(found, dict) else {})}
        inner["properties"] = dict(inner.get("properties") or {})
        if "required" in inner:
            inner["required"] = list(inner["required"])
        schema["properties"][key] = schema = inner
    schema["properties"][path[-1]] = value
    _require(schema, path[-1], required)


def _require(schema: dict[str, Any], key: str, required: bool) -> None:
    if required and key not in schema.setdefault("required", []):
        schema["required"].append(key)


def unknown_args(schema: Mapping[str, Any] | None, args: Any) -> list[str]:
    """The names in `args` that the tool's JSON schema (`args_json_schema`) does not have, at
    any depth (`payee.iban`, `lines.0.qtty`): what validation would drop from an edit
    without a word, running the call as the model wrote it."""
    if not isinstance(schema, Mapping) or not isinstance(args, Mapping):
        return []
    closed = _closed(schema)
    try:
        errors = list(jsonschema.validators.validator_for(closed)(closed).iter_errors(args))
    except Exception:  # a schema it cannot read: the tool's own validation still judges
        return []
    return sorted(set(_unknown_in(errors)))


def _unknown_in(errors: list[jsonschema.ValidationError]) -> list[str]:
    """The names `additionalProperties` refused, and within a union (`Optional[list[M]]`),
    those of the alternative that fails for no other reason (the fewest, if several)."""
    names: list[str] = []
    for error in errors:
        if error.validator in ("anyOf", "oneOf") and error.context:
            branches: dict[Any, list[jsonschema.ValidationError]] = {}
            for sub in error.context:
                branches.setdefault(sub.relative_schema_path[0], []).append(sub)
            only = [found for found in map(_only_unknown, branches.values()) if found]
            if only:
                fewest: list[str] = min(only, key=len)
                names += fewest
        elif (error.validator == "additionalProperties" and isinstance(error.instance, Mapping)
              and isinstance(error.schema, Mapping)):
            known = error.schema.get("properties") or {}
            where = "".join(f"{part}." for part in error.absolute_path)
            names += [f"{where}{key}" for key in error.instance if key not in known]
    return names


def _only_unknown(errors: list[jsonschema.ValidationError]) -> list[str] | None:
    """`_unknown_in` of errors that are nothing else (None: some are)."""
    names = _unknown_in(errors)
    plain = all(e.validator == "additionalProperties" or (
        e.validator in ("anyOf", "oneOf") and e.context) for e in errors)
    return names if plain and names else None


_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def _closed(schema: Any) -> Any:
    """The schema with each object that lists its properties closed to others (unless it
    says what others may be), without what judges values, not names (a `pattern` is the
    tool's regex dialect, not Python's)."""
    if not isinstance(schema, Mapping):
        return schema
    out = {key: value for key, value in schema.items() if key not in ("pattern", "format")}
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _closed(value) for name, value in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_closed(value) for value in out[key]]
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), Mapping):
            out[key] = _closed(out[key])
    if isinstance(out.get("properties"), Mapping) and not (
            {"additionalProperties", "patternProperties", "unevaluatedProperties"} & set(out)):
        out["additionalProperties"] = False
    return out


def secret_paths_of(tool: BaseTool | None, args: Mapping[str, Any]
                    ) -> list[list[str | int]] | None:
    """Where `args` hold the tool's secret values, for masking them in a view: [] without a
    tool; None when the tool cannot read them (the caller decides what such a view shows)."""
    if tool is None:
        return []
    try:
        return validated_args(tool, args)[1]
    except GraphkitError:
        return None


def _parsed(tool: BaseTool, schema: type[BaseModel], args: Mapping[str, Any]
            ) -> tuple[BaseModel, dict[str, Any], list[list[str | int]]]:
    """The validated model, its fields as JSON, and where they hold secrets."""
    try:
        parsed = schema.model_validate(dict(args))
    except ValidationError as exc:
        # where and why, never the values: a message is shown to reviewers, the model and the
        # audit, and a value may be a secret (an edit that kept a masked one has it back)
        msg = (f"arguments are not valid for tool {tool.name!r}: "
               f"{exc.errors(include_url=False, include_context=False, include_input=False)}")
        raise InvalidApprovedArgsError(msg) from None
    # By name (each field's one key: a serialization alias may be another field's name; a
    # schema that writes by alias, `serialize_by_alias`, wrote every field under a key that
    # was then dropped, and the tool ran its defaults: helper-122), then under the key the
    # tool's own validation reads (`_as_input`: `from_` is `from`).
    dumped: dict[str, Any] = parsed.model_dump(mode="json", by_alias=False)
    shown = dumped
    if _masked(dumped):
        try:
            dumped = _revealed(parsed.model_dump(by_alias=False), dumped)
        except ValueError as exc:  # UnicodeDecodeError too: secret bytes that are not text
            msg = f"arguments for tool {tool.name!r} cannot be stored as JSON: {exc}"
            raise InvalidApprovedArgsError(msg) from exc
    # Keep only what was given or has a default, without the injected context.
    names = set(schema.model_fields)
    result = {k: v for k, v in dumped.items() if k in names}
    _as_input(parsed, result)
    if shown is not dumped:  # (the shown form left out the same: it is compared key by key)
        shown = {k: v for k, v in shown.items() if k in names}
        _as_input(parsed, shown)
    secrets = secret_paths(shown, result) if shown is not dumped else []
    secrets += [p for p in _declared_secrets(schema, result)
                if not any(q[:len(p)] == p or p[:len(q)] == q for q in secrets)]
    return parsed, result, secrets


def as_received(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` (as `validated_args` writes them) as the tool receives them, for its
    `needs_approval` predicate: each value of the type the schema parses it into (an Enum
    member, a Decimal, a date, a secret), under the same keys, nested models as dicts. Given
    their JSON form ("prod" where the tool gets `Env.PROD`), a predicate that compared them
    with the tool's own types never asked, and the call ran (helper-122; for a pydantic v1
    schema, which graphkit takes the arguments of as given: helper-123)."""
    schema = args_model(tool)
    if schema is None:
        old = tool.args_schema
        if isinstance(old, type) and issubclass(old, BaseModelV1):
            parsed_v1 = old.parse_obj(dict(args))  # (under a field's alias, or its name)
            typed = {**parsed_v1.dict(), **parsed_v1.dict(by_alias=True)}
            return {k: typed.get(k, v) for k, v in args.items()}
        return dict(args)
    parsed = schema.model_validate(dict(args))
    names = set(schema.model_fields)
    view = {k: v for k, v in parsed.model_dump(by_alias=False).items() if k in names}
    _as_input(parsed, view)
    return {k: view[k] for k in args if k in view}


def _as_input(value: Any, dumped: Any, depth: int = 0) -> None:
    """Make `dumped` (pydantic's dump of `value`, by field name) what the tool's own
    validation reads when the call runs, at every depth (models and dataclasses in models,
    lists, tuples, dicts):
    - each field under the key validation reads it by (its validation alias, or the path of
      an `AliasPath`: a dump by alias wrote a `validation_alias`'s field under its name, which
      the tool refused, and a `serialization_alias`'s under that alias, which was dropped, or
      taken for another field of that name);
    - without a field the arguments did not give whose default is None, as null: pydantic
      never checks a default, and `x: int = None` written out as `null` is refused (every
      approved call of such a tool failed in the tools node). Left out, the tool gets the
      same default; a validator's own default is kept."""
    if depth > 32:
        return
    if isinstance(dumped, dict) and (fields := _fields_of(value)) is not None:
        given = getattr(value, "model_fields_set", None)  # (a dataclass keeps no such set:
        moved: list[tuple[str, tuple[str, ...]]] = []     # a null default is left out as null)
        for name, (read, default) in fields.items():
            if name not in dumped:
                continue
            if (default is None and dumped[name] is None
                    and (given is None or name not in given)):
                del dumped[name]
                continue
            _as_input(getattr(value, name, None), dumped[name], depth + 1)
            if read != (name,):
                moved.append((name, read))
        if moved:
            items = list(dumped.items())
            dumped.clear()
            paths = dict(moved)
            for key, item in items:
                _put(dumped, paths.get(key, (key,)), item)
    elif isinstance(value, list | tuple) and isinstance(dumped, list):
        for item, item_dumped in zip(value, dumped, strict=False):
            _as_input(item, item_dumped, depth + 1)
    elif isinstance(value, dict) and isinstance(dumped, dict):
        for key, item in value.items():
            if str(key) in dumped:  # (JSON's keys are text: `dict[int, Model]` too)
                _as_input(item, dumped[str(key)], depth + 1)


def _put(into: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """`value` at `path` (an `AliasPath`'s keys) in `into`, making the dicts on the way."""
    for key in path[:-1]:
        nested = into.setdefault(key, {})
        if not isinstance(nested, dict):  # (another field holds the key: validation fails
            return                        # on what is left, never on a guess)
        into = nested
    into[path[-1]] = value


def _fields_of(value: Any) -> dict[str, tuple[tuple[str, ...], Any]] | None:
    """A model's or a dataclass's fields: each one's name, the keys validation reads it by (a
    path: one key, or an `AliasPath`'s), and its default (`MISSING` or `PydanticUndefined`
    for none)."""
    config: Mapping[str, Any]
    if isinstance(value, BaseModel):
        fields, config = type(value).model_fields, type(value).model_config
    elif not dataclasses.is_dataclass(value) or isinstance(value, type):
        return None
    elif (pydantic_fields := getattr(type(value), "__pydantic_fields__", None)) is not None:
        fields, config = pydantic_fields, getattr(type(value), "__pydantic_config__", {})
    else:
        return {f.name: ((f.name,), f.default) for f in dataclasses.fields(value)}
    return {name: (read_as(name, field, config), field.default)
            for name, field in fields.items()}


_SECRET_TYPES = (SecretStr, SecretBytes, Secret)


def under_every_name(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` (as the tool reads them) with each argument also under every other key it may
    be given by: what a prompt template's `{{name}}` may name. An argument the call left out
    that the tool runs with as None (its default: `validated_args` leaves it out) reads as
    null: shown as written, `{{memo}}` read as a template nobody filled (helper-122)."""
    schema = args_model(tool)
    if schema is None:
        return dict(args)
    view = dict(args)
    for name, field in schema.model_fields.items():
        keys = names_of(name, field)
        given = next((k for k in keys if k in args), None)
        if given is not None:
            view.update((k, args[given]) for k in keys if k not in args)
        elif field.default is None and field.default_factory is None:
            view.update((k, None) for k in keys)
    return view


def declares_secrets(tool: BaseTool) -> bool:
    """Whether any argument of `tool` may be a secret (`SecretStr` and the like, at any
    depth of its schema)."""
    schema = args_model(tool)
    return schema is not None and bool(_secret_fields(schema))


def _secret_resume_model(tool: BaseTool) -> type[BaseModel] | None:
    """The tool's `resume_schema`, where it declares a secret."""
    schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
    return schema if schema is not None and _secret_fields(schema) else None


def declares_resume_secrets(tool: BaseTool) -> bool:
    """Whether the data a call of `tool` is resumed with may hold a secret (its
    `resume_schema` declares one)."""
    return _secret_resume_model(tool) is not None


def resume_secrets(tool: BaseTool, resumed: Sequence[Any]) -> list[str] | None:
    """The secret values of the data a suspended call was resumed with (`resumed`, as
    `validate_resume` kept it), as `secret_values` gives them, where its `resume_schema`
    declares secrets ([] where it declares none); None where they could not be read. What
    the tool says back must not show them (a one-time code a tool echoes: helper-114)."""
    schema = _secret_resume_model(tool)
    if schema is None:
        return []
    try:
        return [v for data in resumed if data is not None
                for v in secret_values(data, _parsed(tool, schema, data)[2])]
    except Exception:
        return None


def declared_secret_paths(tool: BaseTool | None, args: Any) -> list[list[str | int]]:
    """Where `args`, as the model wrote them, may hold a secret the tool declares, whether
    or not they validate (a call refused for its arguments still keeps them out of sight)."""
    schema = args_model(tool)
    return _declared_secrets(schema, args) if schema is not None else []


def _declared_secrets(schema: type[BaseModel], value: Any,
                      at: list[str | int] | None = None) -> list[list[str | int]]:
    """Where the schema declares a secret that pydantic's dump may show in clear: a field
    typed `str | SecretStr` holds a plain `str` when given a string. Such a field is secret
    as a whole, whatever branch of its type read the value."""
    at = at or []
    if not isinstance(value, Mapping):
        return []
    found: list[list[str | int]] = []
    for key, nested in _secret_fields(schema).items():
        if value.get(key) is None:
            continue
        if nested is None or not isinstance(value[key], Mapping):
            found.append([*at, key])  # (a nested model's secret in a value not shaped as it)
        else:
            found += _declared_secrets(nested, value[key], [*at, key])
    return found


@functools.cache
def _secret_fields(schema: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """The fields of `schema` whose type mentions a secret type: None for a field secret as
    a whole, or the model of a nested field to look into."""
    fields: dict[str, type[BaseModel] | None] = {}
    for name, field in schema.model_fields.items():
        model = _model_of(field.annotation)
        if model is not None and _mentions_secret(model, set()):
            fields.update(dict.fromkeys(names_of(name, field), model))
        elif model is None and _mentions_secret(field.annotation, set()):
            fields.update(dict.fromkeys(names_of(name, field), None))
    return fields


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model of a field typed as one (or as an optional one)."""
    options = [a for a in get_args(annotation) if a is not type(None)] if get_origin(
        annotation) in (Union, UnionType) else [annotation]
    if len(options) == 1 and isinstance(options[0], type) and issubclass(options[0], BaseModel):
        return options[0]
    return None


def _mentions_secret(annotation: Any, seen: set[type]) -> bool:
    origin = get_origin(annotation)
    for candidate in (annotation, origin):
        if isinstance(candidate, type) and issubclass(candidate, _SECRET_TYPES):
            return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        seen.add(annotation)
        return any(_mentions_secret(f.annotation, seen)
                   for f in annotation.model_fields.values())
    return any(_mentions_secret(arg, seen) for arg in get_args(annotation))


def _as_json(model: BaseModel) -> Any:
    """A model as JSON with each secret field's value, not pydantic's mask of it, under the
    keys its own validation reads (the data is validated again where it is used)."""
    dumped = model.model_dump(mode="json")
    if _masked(dumped):
        dumped = _revealed(model.model_dump(), dumped)
    _as_input(model, dumped)
    return dumped


def validate_resume(tool: BaseTool | None, data: Any) -> Any:
    """Resume data as the tool's `resume_schema` reads it, as JSON; a secret field keeps its
    value, which the tool asked for (helper-69): the data is kept in the ledger's record of
    the decision, which no view shows."""
    schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
    if isinstance(data, BaseModel):  # (an instance of the schema, given as the data)
        data = _as_json(data)
    check_value(data, what="resume data", error=ResumeDataError)
    if schema is None:
        storable(data, "resume data", ResumeDataError)
        return data
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        name = tool.name if tool else "?"
        # where and why, never the values: the message is audited, raised to the caller and
        # shown in the next interrupt, and a field may be a secret the tool asked for (a
        # one-time code typed beside a wrong amount; helper-77)
        msg = (
            f"resume data does not match resume_schema {schema.__name__} of tool {name!r}: "
            f"{exc.errors(include_url=False, include_context=False, include_input=False)}"
        )
        raise ResumeDataError(msg) from None
    read = _as_json(parsed)
    check_value(read, what="resume data", error=ResumeDataError)  # (as read: "nan" is NaN)
    return read
