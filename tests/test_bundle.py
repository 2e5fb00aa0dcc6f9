"""Bundle loading: a valid bundle loads; each malformed one fails naming the file (and field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundle_factory import TASK, TOOLS, make_notes_bundle

from envgym.bundle import BundleError, hash_bundle, load_bundle, write_manifest


def _rehash(root: Path) -> None:
    data = json.loads((root / "manifest.json").read_text())
    write_manifest(
        root, name=data["name"], category=data["category"], provenance=data["provenance"]
    )


def test_valid_bundle_loads(tmp_path: Path) -> None:
    bundle = load_bundle(make_notes_bundle(tmp_path / "b"))
    assert bundle.manifest.name == "notes"
    assert bundle.manifest.content_hash == hash_bundle(bundle.root)
    assert [t.id for t in bundle.tasks] == ["secret"]
    assert bundle.task("secret").metadata == {"key": "secret"}
    assert bundle.task(0).submit_tool == "submit_result"


def test_hash_ignores_manifest_and_changes_with_content(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    before = hash_bundle(root)
    (root / "manifest.json").write_text("{}")
    assert hash_bundle(root) == before
    (root / "state" / "extra.txt").write_text("x")
    assert hash_bundle(root) != before


@pytest.mark.parametrize(
    "missing", ["manifest.json", "tools.py", "tasks.jsonl", "solution.py", "verifier.py"]
)
def test_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / missing).unlink()
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.file == missing
    assert "missing" in str(exc.value)


def test_missing_state_dir(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    import shutil

    shutil.rmtree(root / "state")
    with pytest.raises(BundleError, match="state"):
        load_bundle(root)


def test_wrong_schema_version(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    data = json.loads((root / "manifest.json").read_text())
    data["schema_version"] = 2
    (root / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.file == "manifest.json" and exc.value.field == "schema_version"
    assert "unsupported schema version 2" in str(exc.value)


def test_manifest_not_json(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / "manifest.json").write_text("{nope")
    with pytest.raises(BundleError, match=r"manifest.json: not valid JSON"):
        load_bundle(root)


def test_edited_file_fails_hash(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b")
    (root / "verifier.py").write_text((root / "verifier.py").read_text() + "\n# edited\n")
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.field == "content_hash"
    load_bundle(root, verify_hash=False)  # explicitly trusting the edit works


def test_syntax_error_in_tools(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b", tools=TOOLS + "\ndef broken(:\n    pass\n")
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.file == "tools.py"
    assert "syntax error at line" in str(exc.value)


def test_tool_without_type_hints(tmp_path: Path) -> None:
    root = make_notes_bundle(
        tmp_path / "b", tools=TOOLS + "\ndef untyped(city):\n    return city\n"
    )
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.file == "tools.py" and exc.value.field == "untyped"
    assert "parameter 'city' has no type hint" in str(exc.value)


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        ({"solution": "solve_nothing"}, "line 1.solution", "defines no function 'solve_nothing'"),
        ({"verifier": "nope"}, "line 1.verifier", "defines no function 'nope'"),
        ({"submit_tool": "submit_nothing"}, "line 1.submit_tool", "no tool 'submit_nothing'"),
        ({"difficulty": 9}, "line 1.difficulty", "maximum"),
        ({"surprise": 1}, "line 1.(root)", "Additional properties"),
    ],
)
def test_bad_task_fields(tmp_path: Path, change: dict, field: str, needle: str) -> None:
    root = make_notes_bundle(tmp_path / "b", tasks=[{**TASK, **change}])
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.file == "tasks.jsonl"
    assert exc.value.field == field
    assert needle in str(exc.value)


def test_duplicate_task_ids_and_bad_json_line(tmp_path: Path) -> None:
    root = make_notes_bundle(tmp_path / "b", tasks=[TASK, TASK])
    with pytest.raises(BundleError, match="duplicate task id 'secret'"):
        load_bundle(root)
    (root / "tasks.jsonl").write_text(json.dumps(TASK) + "\n{oops\n")
    _rehash(root)
    with pytest.raises(BundleError) as exc:
        load_bundle(root)
    assert exc.value.field == "line 2"


# -- links and special files ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "target"),
    [
        ("state/leak.txt", "/etc/passwd"),  # a file link to a host file
        ("state/host", "/etc"),  # a directory link: its files would be hashed and read
        ("state/inner/loop", "."),  # a link that stays inside is refused as well
        ("tools.py", "/etc/hostname"),  # a code file that is a link
    ],
)
def test_links_anywhere_in_a_bundle_are_refused_by_name(
    tmp_path: Path, where: str, target: str
) -> None:
    root = make_notes_bundle(tmp_path / "b")
    link = root / where
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists():
        link.unlink()
    link.symlink_to(target)
    for load in (
        lambda: hash_bundle(root),
        lambda: load_bundle(root),
        lambda: load_bundle(root, verify_hash=False),
    ):
        with pytest.raises(BundleError) as exc:
            load()
        assert exc.value.file == where
        assert "symbolic link" in str(exc.value) and target in str(exc.value)


def test_a_fifo_in_state_is_refused_not_read(tmp_path: Path) -> None:
    import os

    root = make_notes_bundle(tmp_path / "b")
    os.mkfifo(root / "state" / "pipe")  # reading it would block the host forever
    with pytest.raises(BundleError) as exc:
        load_bundle(root, verify_hash=False)
    assert exc.value.file == "state/pipe" and "not a regular file" in str(exc.value)


# -- loading from many threads ----------------------------------------------------------------

# Enough typed tools that converting the parse tree takes a while (more garbage collections
# inside the conversion, where CPython 3.11.7 lets another thread's parse clobber its counter).
MANY_TOOLS = TOOLS + "".join(
    f'\n\ndef tool_{i}(a: int, b: str = "x") -> str:\n    """Tool {i}."""\n'
    f"    return str([a + {i}, b * {i}, {{'k': (a, b)}}])\n"
    for i in range(150)
)


class _Cycle:
    """Cyclic garbage with a finalizer: a collection of it runs bytecode (and may switch threads)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        pass


@pytest.mark.heavy
@pytest.mark.timeout(240)
def test_load_bundle_from_many_threads_while_other_code_parses(tmp_path: Path) -> None:
    import ast
    import sys
    import threading

    root = make_notes_bundle(tmp_path / "b", tools=MANY_TOOLS)
    stop = threading.Event()
    errors: list[BaseException] = []

    def other_parser() -> None:  # e.g. an in-process tool, a verifier or synthesis code
        while not stop.is_set():
            try:
                ast.parse(MANY_TOOLS)
            except SystemError:
                pass  # unguarded code may still fail; only load_bundle is under test

    def garbage() -> None:
        while not stop.is_set():
            _Cycle()

    def loader() -> None:
        for _ in range(25):
            if errors:
                return
            try:
                load_bundle(root, verify_hash=False)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible: the race shows quickly
    background = [threading.Thread(target=other_parser), threading.Thread(target=garbage)]
    loaders = [threading.Thread(target=loader) for _ in range(4)]
    try:
        for t in background + loaders:
            t.start()
        for t in loaders:
            t.join()
    finally:
        stop.set()
        for t in background:
            t.join()
        sys.setswitchinterval(interval)
    assert not errors, errors[:1]
