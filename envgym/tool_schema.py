"""OpenAI function schemas from plain Python functions (type hints + Google-style docstrings).

Stdlib only: this module runs inside sandboxes whose Python has nothing else installed.

    def get_hotels(city: str, max_price: int | None = None) -> list[dict]:
        \"\"\"Hotels in a city.

        Args:
            city: the city's name.
            max_price: only hotels at most this expensive per night.
        \"\"\"

becomes ``ToolSpec(name="get_hotels", description="Hotels in a city.", parameters={...})`` with
``city`` required and ``max_price`` optional (``"default": null``).
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from envgym.sandbox.base import ToolSpec

__all__ = ["ToolSchemaError", "argument_coercer", "function_schema", "public_tools", "type_schema"]

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?)\s*:\s*$"
)
_ARG_SECTIONS = {"Args", "Arguments", "Parameters", "Params"}
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolSchemaError(TypeError):
    """A function cannot be described as a tool (message names the function and parameter)."""


def type_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of one annotation; raises ``TypeError`` for what JSON cannot carry."""
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is list:
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    if tp is type(None) or tp is None:
        return {"type": "null"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _literal_schema([m.value for m in tp], what=f"enum {tp.__name__}")
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        schema = type_schema(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**schema, "description": " ".join(notes)} if notes else schema
    if origin is typing.Literal:
        return _literal_schema(list(args), what="Literal")
    if origin is typing.Union or origin is types.UnionType:
        return _union_schema(args)
    if origin is list:
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"dict keys must be str (JSON objects), not {_name(args[0])}")
        return (
            {"type": "object", "additionalProperties": type_schema(args[1])}
            if args
            else {"type": "object"}
        )
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        items = [type_schema(a) for a in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if tp is tuple:
        return {"type": "array"}
    raise TypeError(f"unsupported type {_name(tp)}")


def _literal_schema(values: list[Any], *, what: str) -> dict[str, Any]:
    kinds = set()
    for v in values:
        if v is not None and type(v) not in _SCALARS:
            raise TypeError(f"{what} values must be str, int, float, bool or None, not {v!r}")
        kinds.add("null" if v is None else _SCALARS[type(v)])
    if len(kinds) == 1:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def _union_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    options = [a for a in args if a is not type(None)]
    nullable = len(options) < len(args)
    if len(options) == 1:
        inner = type_schema(options[0])
        if not nullable:
            return inner
        # {"type": ["string", "null"]} reads better to a model than anyOf; only safe when the
        # inner schema has a plain type and no enum (an enum would then have to list null too).
        if isinstance(inner.get("type"), str) and "enum" not in inner:
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    schemas = [type_schema(a) for a in options]
    if nullable:
        schemas.append({"type": "null"})
    return {"anyOf": schemas}


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _json_default(value: Any) -> Any:
    """A parameter default as JSON, or raise: the schema must not lie about the default."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        return [_json_default(v) for v in value]
    if isinstance(value, list):
        return [_json_default(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_default(v) for k, v in value.items()}
    if value is None or type(value) in _SCALARS:
        return value
    raise TypeError(f"default {value!r} is not JSON-compatible")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(first paragraph, {parameter: description}) of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    i = 0
    while i < len(lines) and lines[i].strip() and not _SECTION.match(lines[i].strip()):
        summary.append(lines[i].strip())
        i += 1
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent = 0
    for line in lines[i:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(stripped) if indent == 0 else None
        if header:
            section, current = header.group(1), None
            continue
        if section not in _ARG_SECTIONS or not stripped:
            continue
        match = _ARG_LINE.match(stripped)
        if match and (current is None or indent <= base_indent):
            current, base_indent = match.group(1), indent
            params[current] = match.group(2).strip()
        elif current is not None:  # continuation line of the current parameter
            params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(summary), params


def function_schema(fn: Callable[..., Any]) -> ToolSpec:
    """The tool spec of ``fn``; raises :class:`ToolSchemaError` naming what is wrong."""
    name = getattr(fn, "__name__", repr(fn))
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
    except Exception as exc:  # a NameError in a string annotation, a builtin, ...
        raise ToolSchemaError(f"tool {name}: cannot read its signature: {exc}") from None
    description, docs = parse_docstring(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        where = f"tool {name}, parameter {param.name!r}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ToolSchemaError(
                f"{where}: *args, **kwargs and positional-only parameters cannot be tool arguments"
            )
        if param.name not in hints:
            raise ToolSchemaError(f"{where}: missing type hint")
        try:
            schema = type_schema(hints[param.name])
            if param.default is not param.empty:
                schema = {**schema, "default": _json_default(param.default)}
        except TypeError as exc:
            raise ToolSchemaError(f"{where}: {exc}") from None
        if param.name in docs and docs[param.name]:
            schema = {**schema, "description": docs[param.name]}
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return ToolSpec(name=name, description=description, parameters=parameters)


def public_tools(module: types.ModuleType) -> list[Callable[..., Any]]:
    """Public functions *defined in* ``module``, in definition order.

    Imported functions, ``_private`` names and aliases (``get = _get``: the bound name differs
    from the function's own) are not tools.
    """
    return [
        obj
        for attr, obj in vars(module).items()
        if not attr.startswith("_")
        and inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and obj.__name__ == attr
    ]


def argument_coercer(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """A function turning JSON argument values into ``fn``'s declared Enum members and tuples.

    None when no parameter needs it (the common case), so calls pay nothing.  Top level only:
    nested containers keep their JSON shapes.
    """
    converters: dict[str, Callable[[Any], Any]] = {}
    for key, tp in typing.get_type_hints(fn).items():
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = options[0] if len(options) == 1 else None
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            converters[key] = tp
        elif tp is tuple or typing.get_origin(tp) is tuple:
            converters[key] = tuple
    if not converters:
        return None

    def coerce(arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            k: converters[k](v) if k in converters and v is not None else v
            for k, v in arguments.items()
        }

    return coerce
