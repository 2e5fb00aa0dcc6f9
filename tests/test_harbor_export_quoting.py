"""envgym/envs/harbor_export/quoting.py: any text is data in TOML and in a shell word."""

from __future__ import annotations

import subprocess
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgym.envs.harbor_export.quoting import QuotingError, shell_word, toml_document, toml_value


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_is_one_toml_string(text: str) -> None:
    assert tomllib.loads(f"x = {toml_value(text)}\ny = 1\n") == {"x": text, "y": 1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(exclude_characters="\0")), max_size=4))
def test_any_text_is_one_shell_word(words: list[str]) -> None:
    script = "printf '%s\\0' " + " ".join(shell_word(w) for w in words) if words else "true"
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    assert done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == words


def test_documents_keep_hostile_keys_and_values_inside_their_tables() -> None:
    hostile = 'v"\n[evil]\nk = 1\n\x7f'
    text = toml_document({"version": "1.0"}, {"metadata": {hostile: [hostile, {hostile: 1}]}})
    assert tomllib.loads(text) == {"version": "1.0", "metadata": {hostile: [hostile, {hostile: 1}]}}


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_values_toml_cannot_hold_are_refused(bad: float) -> None:
    with pytest.raises(QuotingError):
        toml_value(bad)
    with pytest.raises(QuotingError, match="NUL"):
        shell_word("a\0b")
