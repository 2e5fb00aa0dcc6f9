"""Search-QA verifier: answer equivalence beyond exact match, one check per rule.

Normalization (NFKC, case, surrounding quotes and punctuation, whitespace, a trailing period,
a leading "the") then comparison with the answer or any alias.  Per kind:

* ``name`` — Debian package names: exact after normalization (``libfoo1`` is not ``libfoo``);
  "the package is libfoo" is *not* accepted — the answer must be the name alone.
* ``person`` — maintainer names: also accepts the e-mail address and "Name <email>".
* ``version`` — exact after normalization; an epoch-less form of an epoch version ("2:1.0-1" →
  "1.0-1") is accepted, nothing numeric is rounded ("1.10" is not "1.1").
* ``number`` — integers: "12", "12.0", "twelve" (up to twenty) are equal.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
          "fifteen sixteen seventeen eighteen nineteen twenty").split()  # fmt: skip
_EDGE = "\"'`“”‘’.,;:!?()[]{} \t\n"


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = " ".join(text.split()).strip(_EDGE)
    return text[4:] if text.startswith("the ") else text


def _number(text: str) -> int | None:
    if text in _WORDS:
        return _WORDS.index(text)
    if re.fullmatch(r"-?\d+(\.0+)?", text):
        return int(float(text))
    return None


def equivalent(given: str, expected: str, aliases: list[str], kind: str) -> bool:
    got = normalize(given)
    if not got:
        return False
    accepted = {normalize(a) for a in [expected, *aliases] if normalize(a)}
    if got in accepted:
        return True
    if kind == "version":
        return any(a.split(":", 1)[1] == got for a in accepted if ":" in a)
    if kind == "number":
        value = _number(got)
        return value is not None and value == _number(normalize(expected))
    return False


def verify_answer(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    meta = task["metadata"]
    answer = submission.get("answer", submission.get("content", ""))
    given = answer if isinstance(answer, str) else ""
    checks = [{"name": "answer_given", "passed": bool(given.strip()),
               "detail": "" if given.strip() else "no answer was submitted"}]  # fmt: skip
    if given.strip():
        ok = equivalent(given, meta["answer"], list(meta.get("aliases", [])), meta.get("kind", "name"))
        checks.append({"name": "answer_correct", "passed": ok, "detail": "" if ok else "the answer is wrong"})
    return {"checks": checks}
