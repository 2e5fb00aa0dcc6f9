"""What a model server serves, as the model part of an evaluation key.

A URL names a place, not a model: a new checkpoint behind the same URL used to find the old
checkpoint's stored episodes and report them as its own.  So a served model is keyed by the
entry its server lists at ``/models`` for it (the named one, else the first: the one the policy
uses), from the fields that say which weights are loaded:

* ``id`` — the served name (``--served-model-name``, or the path / repo id);
* ``root`` — vLLM: the path or repo id the weights were loaded from (differs per checkpoint even
  under one ``--served-model-name``); ``parent`` — vLLM: a LoRA adapter's base model;
* ``max_model_len`` — vLLM: the window the server was started with (it changes results);
* ``fingerprint`` — a weights hash, where a server states one.

Not ``created``: vLLM sets it to the time of each reply.  Not the URL: the same checkpoint at
another address is the same model.  When no entry can be read (the server is down, has no
``/models``, does not list the named model, or answers something malformed) the identity is
unknown; the runner then keys by URL and reuses nothing stored unless ``--same-model``.

The reply is a remote party's: it is read up to :data:`MAX_REPLY_BYTES`, and a field that is not
a short string (or a positive integer for ``max_model_len``) makes the identity unknown.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from .models import ModelRef

MAX_REPLY_BYTES = 1 << 20
MAX_FIELD_CHARS = 512
MAX_ENTRIES = 4096
STRING_FIELDS = ("id", "root", "parent", "fingerprint")
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServedIdentity:
    """``fingerprint``: ``served:sha256:…`` of the identifying fields, None when unknown;
    ``detail``: those fields (for people), or why they could not be read."""

    fingerprint: str | None
    detail: str


def keyed_ref(ref: ModelRef) -> tuple[ModelRef, str, bool]:
    """``ref`` as the key holds it, what identified it, and whether anything did.

    A server's ref gets its served identity as fingerprint (or keeps its URL-based one, with
    ``"unknown: why"``); any other ref passes through (its fingerprint hashes content already)."""
    if ref.kind != "http":
        return ref, "", True
    served = served_identity(ref.spec)
    if served.fingerprint is None:
        return ref, f"unknown: {served.detail}", False
    return replace(ref, fingerprint=served.fingerprint), served.detail, True


def served_identity(spec: str) -> ServedIdentity:
    """The identity of the model ``spec`` (``URL`` or ``URL#served-name``) names."""
    url, _, name = spec.partition("#")
    try:
        listing = _read_models(url.rstrip("/") + "/models")
    except _Unknown as why:
        return ServedIdentity(None, str(why))
    try:
        return _identify(listing, name)
    except _Unknown as why:
        return ServedIdentity(None, str(why))


class _Unknown(Exception):
    """Why a server's identity could not be established."""


def _read_models(url: str) -> Any:
    import httpx

    try:
        with httpx.stream("GET", url, timeout=TIMEOUT_S, follow_redirects=False) as reply:
            if reply.status_code != 200:
                raise _Unknown(f"{url} answered HTTP {reply.status_code}")
            body = bytearray()
            for chunk in reply.iter_bytes():
                body.extend(chunk)
                if len(body) > MAX_REPLY_BYTES:
                    raise _Unknown(f"{url} answered more than {MAX_REPLY_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise _Unknown(f"{url} could not be read ({type(exc).__name__}: {exc})") from None
    try:
        return json.loads(bytes(body))
    except ValueError:
        raise _Unknown(f"{url} answered something that is not JSON") from None


def _identify(listing: Any, name: str) -> ServedIdentity:
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list) or not data:
        raise _Unknown("its /models lists no models")
    if len(data) > MAX_ENTRIES:
        raise _Unknown(f"its /models lists more than {MAX_ENTRIES} models")
    entry = next(
        (m for m in data if isinstance(m, dict) and (not name or m.get("id") == name)), None
    )
    if entry is None:
        raise _Unknown(
            f"its /models does not list {name!r}" if name else "its /models is malformed"
        )
    fields: dict[str, object] = {}
    for key in STRING_FIELDS:
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > MAX_FIELD_CHARS:
            raise _Unknown(f"its /models gives a malformed {key!r}")
        fields[key] = value
    if "id" not in fields:
        raise _Unknown("its /models entry has no id")
    window = entry.get("max_model_len")
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise _Unknown("its /models gives a malformed 'max_model_len'")
        fields["max_model_len"] = window
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=True)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    detail = ", ".join(f"{k}={v}" for k, v in fields.items())
    return ServedIdentity(f"served:sha256:{digest}", detail)
