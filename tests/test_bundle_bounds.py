"""Hostile bundles: every size, count and depth the host reads is bounded, and each excess is a
BundleError naming the file (and line) and the limit — at load, in the state copy, on the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bundle_factory import TASK, make_notes_bundle
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from envgym.bundle import BundleError, BundleLimits, hash_bundle, load_bundle, write_manifest
from envgym.bundle_limits import json_depth, parse_json, read_tree
from envgym.cli import app
from envgym.state import PristineState

GIB = 1 << 30
runner = CliRunner()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One valid bundle, copied by each test that spoils it (building one runs SQLite)."""
    return make_notes_bundle(tmp_path_factory.mktemp("bounds") / "b")


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "b"))


def _rehash(root: Path) -> None:
    """Make the manifest match the spoiled files, so only the bound under test can refuse them."""
    data = json.loads((root / "manifest.json").read_text())
    write_manifest(
        root, name=data["name"], category=data["category"], provenance=data["provenance"]
    )


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)  # a hole: no blocks on disk, `size` bytes to whoever reads it


def _refused(
    root: Path, file: str, *needles: str, limits: BundleLimits | None = None
) -> BundleError:
    """load_bundle fails on ``file`` (a prefix ending in "*": any file under it), naming needles."""
    with pytest.raises(BundleError) as exc:
        load_bundle(root) if limits is None else load_bundle(root, limits=limits)
    if file.endswith("*"):
        assert exc.value.file.startswith(file[:-1]), str(exc.value)
    else:
        assert exc.value.file == file, str(exc.value)
    for needle in needles:
        assert needle in str(exc.value)
    return exc.value


# -- sizes --------------------------------------------------------------------------------------


def test_sparse_2gib_state_file_is_refused_before_it_is_read(root: Path) -> None:
    _sparse(root / "state" / "huge.bin", 2 * GIB)
    for load in (
        lambda: load_bundle(root),
        lambda: load_bundle(root, verify_hash=False),
        lambda: hash_bundle(root),
        lambda: PristineState(root / "state"),
    ):
        with pytest.raises(BundleError) as exc:
            load()
        assert exc.value.file == "state/huge.bin"
        assert "file_bytes" in str(exc.value) and "ENVGYM_BUNDLE_MAX_FILE_BYTES" in str(exc.value)


def test_allocated_blocks_count_not_only_the_apparent_size(root: Path) -> None:
    big = root / "state" / "prealloc.bin"
    big.touch()
    if shutil.which("fallocate") is None:
        pytest.skip("no fallocate(1)")
    done = subprocess.run(
        ["fallocate", "--keep-size", "-l", "4MiB", str(big)], capture_output=True, check=False
    )
    if done.returncode != 0 or os.stat(big).st_blocks * 512 < 4 << 20:
        pytest.skip("this filesystem cannot preallocate beyond a file's size")
    assert os.stat(big).st_size == 0
    _refused(root, "state/prealloc.bin", "allocated", limits=BundleLimits(file_bytes=1 << 20))


def test_state_total_is_bounded(root: Path) -> None:
    for i in range(3):
        (root / "state" / f"part{i}.bin").write_bytes(b"x" * 40_000)
    _rehash(root)
    limits = BundleLimits(state_bytes=100_000)
    _refused(root, "state/part2.bin", "state_bytes", limits=limits)
    with pytest.raises(BundleError, match="state_bytes"):
        read_tree(root / "state", limits)


def test_whole_bundle_total_and_any_other_file(root: Path) -> None:
    (root / "notes.txt").write_bytes(b"y" * 50_000)
    _rehash(root)
    _refused(root, "notes.txt", "file_bytes", limits=BundleLimits(file_bytes=40_000))
    _refused(root, "*", "bundle_bytes = 60000", limits=BundleLimits(bundle_bytes=60_000))


def test_limits_come_from_the_environment(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "state" / "blob.bin").write_bytes(b"z" * 3000)
    _rehash(root)
    monkeypatch.setenv("ENVGYM_BUNDLE_MAX_FILE_BYTES", "2048")
    assert BundleLimits.from_env().file_bytes == 2048
    _refused(root, "state/blob.bin", "2048")
    with pytest.raises(BundleError, match="ENVGYM_BUNDLE_MAX_FILE_BYTES"):
        PristineState(root / "state")
    monkeypatch.setenv("ENVGYM_BUNDLE_MAX_FILE_BYTES", str(1 << 30))  # a user raising it
    assert load_bundle(root).manifest.name == "notes"
    for bad in ("lots", "-3", "0"):
        monkeypatch.setenv("ENVGYM_BUNDLE_MAX_FILE_BYTES", bad)
        with pytest.raises(ValueError, match="ENVGYM_BUNDLE_MAX_FILE_BYTES must be a whole number"):
            BundleLimits.from_env()
    with pytest.raises(ValueError, match="positive"):
        BundleLimits(entries=0)


def test_manifest_size(root: Path) -> None:
    data = json.loads((root / "manifest.json").read_text())
    data["description"] = "d" * (70 << 10)
    (root / "manifest.json").write_text(json.dumps(data))
    _refused(root, "manifest.json", "manifest_bytes")


def test_code_file_size(root: Path) -> None:
    with open(root / "verifier.py", "a") as fh:
        fh.write("# padding\n" * 1000)
    _rehash(root)
    _refused(root, "verifier.py", "code_bytes", limits=BundleLimits(code_bytes=5000))


# -- counts and depth of the tree ---------------------------------------------------------------


def test_too_many_entries_and_too_deep_directories(root: Path) -> None:
    for i in range(30):
        (root / "state" / f"f{i:02}").write_text("x")
    _refused(root, "state/f*", "entries = 20", limits=BundleLimits(entries=20))
    deep = root / "state"
    for _ in range(6):
        deep = deep / "d"
    deep.mkdir(parents=True)
    _refused(root, "state/d/d/d/d", "dir_depth", limits=BundleLimits(dir_depth=4))


def test_name_that_is_not_utf8_is_refused(root: Path) -> None:
    os.close(
        os.open(os.path.join(os.fsencode(root / "state"), b"bad\xff"), os.O_CREAT | os.O_WRONLY)
    )
    with pytest.raises(BundleError, match="not UTF-8"):
        hash_bundle(root)


def test_state_copy_never_follows_a_link(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "leak").symlink_to("/etc/hostname")
    with pytest.raises(BundleError, match="symbolic link"):
        PristineState(state)
    (state / "leak").unlink()
    (state / "sub").symlink_to("/etc")
    with pytest.raises(BundleError, match="symbolic link"):
        PristineState(state)


def test_state_copy_keeps_files_dirs_and_modes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "a" / "b").mkdir(parents=True)
    (state / "a" / "b" / "x.txt").write_text("hi")
    (state / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(state / "run.sh", 0o750)
    got = {e.rel: (e.data, e.mode) for e in PristineState(state).entries}
    assert got["a"][0] is None and got["a/b"][0] is None
    assert got["a/b/x.txt"][0] == b"hi" and got["run.sh"] == (b"#!/bin/sh\n", 0o750)
    order = [e.rel for e in PristineState(state).entries]
    assert order.index("a") < order.index("a/b") < order.index("a/b/x.txt")


# -- tasks.jsonl --------------------------------------------------------------------------------


def _tasks(root: Path, text: str | bytes) -> None:
    path = root / "tasks.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _rehash(root)


def test_100k_deep_json_in_tasks_is_a_bundle_error(root: Path) -> None:
    good = json.dumps(TASK)
    _tasks(root, good + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    err = _refused(root, "tasks.jsonl", "nests too deeply", "json_depth = 64")
    assert err.field == "line 2"


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"id": "x", "metadata": {"n": ' + "9" * 5000 + "}}", "not valid JSON"),  # int digit limit
        ('{"id": "\\ud800", "prompt": "p"}', "surrogate"),
        ('{"id": "x"', "not valid JSON"),
        ('{"id": "' + '\\"' * 10_000, "not valid JSON"),  # unterminated: the scan stays linear
    ],
)
def test_parse_bombs_in_tasks_name_the_line(root: Path, line: str, needle: str) -> None:
    _tasks(root, json.dumps(TASK) + "\n\n" + line + "\n")
    err = _refused(root, "tasks.jsonl", needle)
    assert err.field == "line 3"


def test_tasks_not_utf8_names_the_line(root: Path) -> None:
    _tasks(root, json.dumps(TASK).encode() + b"\n\xff\xfe\n")
    assert _refused(root, "tasks.jsonl", "UTF-8").field == "line 2"


def test_tasks_line_length_line_count_and_size(root: Path) -> None:
    second = dict(TASK, id="two", prompt="p" * 5000)
    _tasks(root, json.dumps(TASK) + "\n" + json.dumps(second) + "\n")
    assert load_bundle(root).task("two").prompt == "p" * 5000
    assert (
        _refused(
            root, "tasks.jsonl", "task_line_bytes", limits=BundleLimits(task_line_bytes=4096)
        ).field
        == "line 2"
    )
    _tasks(root, json.dumps(TASK) + "\n" * 50)
    assert (
        _refused(root, "tasks.jsonl", "task_lines", limits=BundleLimits(task_lines=10)).field
        == "line 11"
    )
    _refused(root, "tasks.jsonl", "tasks_bytes", limits=BundleLimits(tasks_bytes=100))


def test_unicode_line_separator_inside_a_prompt_is_not_a_line_break(root: Path) -> None:
    task = dict(TASK, prompt="first\u2028second\x85third")
    _tasks(root, json.dumps(task, ensure_ascii=False) + "\n")
    assert load_bundle(root).task(0).prompt == "first\u2028second\x85third"


def test_deep_json_in_the_manifest(root: Path) -> None:
    data = json.loads((root / "manifest.json").read_text())
    text = json.dumps(data)[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}"
    (root / "manifest.json").write_text(text)
    _refused(root, "manifest.json", "json_depth")


# -- code files ---------------------------------------------------------------------------------

DEEP_PYTHON = {
    "unary": "X = " + "-" * 100_000 + "1\n",
    "not": "X = " + "not " * 100_000 + "1\n",
    "sum": "X = " + "+".join(["1"] * 200_000) + "\n",
    "attribute": "X = a" + ".b" * 200_000 + "\n",
    "calls": "X = a" + "()" * 200_000 + "\n",
    "parens": "X = " + "(" * 1000 + "1" + ")" * 1000 + "\n",
}


@pytest.mark.parametrize("kind", sorted(DEEP_PYTHON))
def test_deeply_nested_python_is_a_bundle_error(root: Path, kind: str) -> None:
    with open(root / "verifier.py", "a") as fh:
        fh.write(DEEP_PYTHON[kind])
    _rehash(root)
    _refused(root, "verifier.py")


# -- the JSON depth scan ------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\u2028'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\k'), inner, max_size=3)
    ),
    max_leaves=30,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_json_depth_scan_matches_the_real_nesting(value: object, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_depth(text) == _depth(value)
    assert parse_json(text, "t.json", BundleLimits(json_depth=max(_depth(value), 1))) == value


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "check"])
@pytest.mark.parametrize("spoil", ["deep_json", "sparse_state", "deep_python", "bad_limit"])
def test_cli_prints_a_clear_error_not_a_traceback(
    root: Path, command: str, spoil: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    needle = {
        "deep_json": "tasks.jsonl: line 1",
        "sparse_state": "state/huge.bin",
        "deep_python": "tools.py",
        "bad_limit": "ENVGYM_BUNDLE_MAX_JSON_DEPTH",
    }[spoil]
    if spoil == "deep_json":
        _tasks(root, "[" * 50_000 + "\n")
    elif spoil == "sparse_state":
        _sparse(root / "state" / "huge.bin", 2 * GIB)
    elif spoil == "deep_python":
        with open(root / "tools.py", "a") as fh:
            fh.write(DEEP_PYTHON["unary"])
        _rehash(root)
    else:
        monkeypatch.setenv("ENVGYM_BUNDLE_MAX_JSON_DEPTH", "-3")
    result = runner.invoke(app, [command, str(root)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "error:" in result.stderr and needle in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    "answer", ["'[' * 100_000 + ']' * 100_000", "'[' + '9' * 5000 + ']'"], ids=["deep", "digits"]
)
def test_check_survives_a_gold_submission_holding_hostile_json(root: Path, answer: str) -> None:
    """envgym check expands JSON held in string arguments to corrupt it field by field; a gold
    answer from bundle code nested 100k deep (or a digit bomb) stays a plain string instead."""
    solution = (root / "solution.py").read_text()
    call = "tools.submit_result(answer_text=value)"
    assert call in solution
    (root / "solution.py").write_text(
        solution.replace(call, f"tools.submit_result(answer_text={answer})")
    )
    _rehash(root)
    result = runner.invoke(
        app, ["check", str(root), "--json", "--corruptions", "3", "--reruns", "1"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1  # the verifier rejects that gold answer: a report, not a crash
    assert json.loads(result.stdout)["passed"] is False


def test_show_prints_bundle_text_literally(root: Path) -> None:
    """Rich markup in bundle text ("[/z]") used to raise MarkupError; escape codes never reach
    the terminal raw."""
    _tasks(root, json.dumps(dict(TASK, prompt="[/z] hi \x1b[2J")) + "\n")
    result = runner.invoke(app, ["show", str(root)])
    assert result.exit_code == 0, repr(result.exception)
    assert "[/z] hi \\x1b[2J" in result.stdout and "\x1b" not in result.stdout
    _tasks(root, json.dumps(dict(TASK, id="[/x]")) + "\n")  # the error message quotes the id
    result = runner.invoke(app, ["check", str(root)])
    assert result.exit_code == 2, repr(result.exception)
    assert "'[/x]' does not match" in result.stderr
