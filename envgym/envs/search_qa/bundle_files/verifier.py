"""Search-QA verifier: answer equivalence beyond exact match, one check per rule.

Normalization (NFKC, case, surrounding quotes and punctuation, whitespace, a trailing period,
a leading "the") then comparison with the answer or any alias.  Per kind:

* ``name`` — Debian package names: exact after normalization (``libfoo1`` is not ``libfoo``);
  "the package is libfoo" is *not* accepted — the answer must be the name alone.
* ``person`` — maintainer names: also accepts the e-mail address and "Name <email>".
* ``version`` — exact after normalization; an epoch-less form of an epoch version ("2:1.0-1" →
  "1.0-1") is accepted, nothing numeric is rounded ("1.10" is not "1.1").
* ``number`` — integers: "12", "12.0", "twelve" (up to twenty) are equal.  Compared as exact
  integers of at most ``MAX_DIGITS`` digits: never through ``float`` (a 400-digit answer is
  ``inf`` there, and ``int(inf)`` raises), so "1e400", "inf" and "nan" are simply not numbers.

Whatever an agent (or a synthesis model, whose candidates go through ``equivalent`` too)
submits, the verdict is a normal report: an answer over ``MAX_CHARS`` is wrong, not parsed, and
``verify_answer`` never raises.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen", "twenty"]  # fmt: skip
_EDGE = "\"'`“”‘’.,;:!?()[]{} \t\n"
MAX_CHARS = 10_000  # longer answers are wrong without normalizing them (NFKC grows text up to 18x)
MAX_DIGITS = 1_000  # a number answer's digits; int() refuses > 4300 and no real count is near
_INTEGER = re.compile(rf"(-?)(\d{{1,{MAX_DIGITS}}})(?:\.0+)?")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = " ".join(text.split()).strip(_EDGE)
    return text.removeprefix("the ")


def _number(text: str) -> int | None:
    """The integer ``text`` names ("12", "12.0", "-3", "twelve"), exactly; None if it names none."""
    if text in _WORDS:
        return _WORDS.index(text)
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    sign, digits = match.groups()
    try:
        return int(sign + digits)
    except ValueError:  # digits int() does not read (it reads every Unicode decimal digit)
        return None


def equivalent(given: str, expected: str, aliases: list[str], kind: str) -> bool:
    if not isinstance(given, str) or len(given) > MAX_CHARS:
        return False
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
    submission = submission if isinstance(submission, dict) else {}
    answer = submission.get("answer", submission.get("content", ""))
    given = answer if isinstance(answer, str) else ""
    checks = [{"name": "answer_given", "passed": bool(given.strip()),
               "detail": "" if given.strip() else "no answer was submitted"}]  # fmt: skip
    if given.strip():
        if len(given) > MAX_CHARS:
            ok, detail = False, f"the answer is longer than {MAX_CHARS} characters"
        else:
            try:
                aliases = list(meta.get("aliases", []))
                ok = equivalent(given, meta["answer"], aliases, meta.get("kind", "name"))
                detail = "" if ok else "the answer is wrong"
            except Exception as exc:  # noqa: BLE001 -- last resort: reject, never crash
                ok, detail = False, f"the answer could not be checked ({type(exc).__name__})"
        checks.append({"name": "answer_correct", "passed": ok, "detail": detail})
    return {"checks": checks}
