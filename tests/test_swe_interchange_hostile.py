"""Harbor import and export with hostile input: links, sizes, ids and values that want to be code.

Import opens nothing a task directory holds except regular files, without following links,
bounded; ids are checked at load; export writes every accepted value so that it stays data — the
scripts parse the same whatever the values, and each value reads back unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgym.envs.swe.instance import InstanceError, SweInstance, from_record, read_instances
from envgym.envs.swe.interchange import export_harbor_task, import_harbor, import_harbor_dir

SHA = "0123456789abcdef0123456789abcdef01234567"
PATCH = (
    "diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n"
    "@@ -1 +1 @@\n-a\n+b\n"
)
GOOD = SweInstance(
    instance_id="owner__name-1",
    repo="owner/name",
    base_commit=SHA,
    problem_statement="Fix it.",
    patch=PATCH.replace("tests/t.py", "m.py"),
    test_patch=PATCH,
    fail_to_pass=("tests/t.py::test_a",),
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_harbor_task(GOOD, tmp_path_factory.mktemp("good") / "task")


def _copy(task: Path, dest: Path) -> Path:
    shutil.copytree(task, dest)
    return dest


@pytest.mark.parametrize(
    "relpath",
    ["tests/config.json", "instruction.md", "task.toml", "tests/test.patch", "solution/solve.sh"],
)
@pytest.mark.parametrize("target", ["/etc/shadow", "/proc/self/environ", "/etc/passwd"])
def test_a_linked_file_is_refused_not_read(
    exported: Path, tmp_path: Path, relpath: str, target: str
) -> None:
    task = _copy(exported, tmp_path / "t")
    if relpath != "tests/config.json":  # without the record, every other file is read
        (task / "tests/config.json").unlink()
    (task / relpath).unlink()
    os.symlink(target, task / relpath)
    with pytest.raises(InstanceError, match="symbolic link") as caught:
        import_harbor(task)
    assert relpath in str(caught.value)


def test_a_linked_directory_is_refused(exported: Path, tmp_path: Path) -> None:
    task = _copy(exported, tmp_path / "t")
    outside = tmp_path / "outside"
    shutil.move(task / "tests", outside)
    os.symlink(outside, task / "tests")
    with pytest.raises(InstanceError, match="symbolic link"):
        import_harbor(task)
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(exported, root / "linked-task")
    with pytest.raises(InstanceError, match="symbolic link"):
        import_harbor_dir(root)


def test_fifos_and_huge_files_are_refused(exported: Path, tmp_path: Path) -> None:
    task = _copy(exported, tmp_path / "t")
    (task / "tests/config.json").unlink()
    os.mkfifo(task / "tests/config.json")  # opening it for reading would block forever
    with pytest.raises(InstanceError, match="not a regular file"):
        import_harbor(task)
    (task / "tests/config.json").unlink()
    with (task / "tests/config.json").open("wb") as handle:
        handle.truncate(33 * 1024 * 1024)  # sparse: big to stat, cheap to make
    with pytest.raises(InstanceError, match="larger than"):
        import_harbor(task)


def test_deep_nesting_is_an_error_not_a_traceback(exported: Path, tmp_path: Path) -> None:
    task = _copy(exported, tmp_path / "t")
    (task / "tests/config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InstanceError, match="nested too deeply"):
        import_harbor(task)
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InstanceError, match="nested too deeply"):
        read_instances(tmp_path / "deep.jsonl")


@pytest.mark.parametrize(
    "bad_id",
    [
        "x\nreward 1",
        "x; reward 1",
        "$(touch /tmp/envgym-pwned)",
        "a b",
        "../../etc",
        "x/y",
        "..",
        "",
        "x'y",
        "ü",
        "a\rb",
        "x" * 201,
    ],
)
def test_hostile_instance_ids_are_refused_at_import(
    exported: Path, tmp_path: Path, bad_id: str
) -> None:
    task = _copy(exported, tmp_path / "t")
    record = json.loads((task / "tests/config.json").read_text())
    (task / "tests/config.json").write_text(json.dumps({**record, "instance_id": bad_id}))
    with pytest.raises(InstanceError, match="instance_id") as caught:
        import_harbor(task)
    assert caught.value.field == "instance_id"
    (task / "tests/config.json").unlink()  # the foreign path: task.toml's [metadata]
    toml = (task / "task.toml").read_text()
    toml = re.sub(r'instance_id = ".*"', lambda _: f"instance_id = {json.dumps(bad_id)}", toml)
    (task / "task.toml").write_text(toml)
    if bad_id:  # an empty one stands for "use the folder's name"
        with pytest.raises(InstanceError):
            import_harbor(task)
    with pytest.raises(InstanceError, match="instance_id"):
        from_record({**record, "instance_id": bad_id})


def test_a_lone_surrogate_is_refused_at_load(tmp_path: Path) -> None:
    line = json.dumps(
        {
            "instance_id": "a-1",
            "repo": "o/r",
            "base_commit": SHA,
            "problem_statement": "x\\ud800",
            "patch": "",
            "test_patch": "",
        }
    )
    (tmp_path / "s.jsonl").write_text(line.replace("\\\\ud800", "\\ud800") + "\n")
    with pytest.raises(InstanceError, match="surrogate"):
        read_instances(tmp_path / "s.jsonl")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("metadata", {"recipe": {"python": "3.11-slim\nRUN touch /pwned"}}),
        ("metadata", {"recipe": "pip install x \\"}),
        ("metadata", {"recipe": ["cat <<EOF"]}),
        ("metadata", {"recipe": ["pip install x\x0bRUN y", "a\x00b"]}),
        ("repo_url", "--upload-pack=touch /tmp/x"),
        ("repo_url", "https://example.com/a\nRUN touch /pwned"),
        ("patch", "a\x00b"),
    ],
)
def test_values_a_dockerfile_cannot_hold_are_refused_at_export(
    tmp_path: Path, field: str, value: object
) -> None:
    bad = SweInstance(**{**GOOD.__dict__, field: value})
    with pytest.raises(InstanceError, match="cannot be exported|recipe"):
        export_harbor_task(bad, tmp_path / "t")
    assert not (tmp_path / "t").exists()


_value = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)
_hostile = st.sampled_from(
    [
        "--co",
        "-p no:x",
        "$(touch /tmp/envgym-pwned)",
        "`id`",
        "'",
        '"',
        "x\nreward 1",
        "a b",
        "\\",
        "${tests[@]}",
        "*",
        "!",
    ]
)


@pytest.mark.timeout(120)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ids=st.lists(st.one_of(_hostile, _value), min_size=1, max_size=4),
    statement=_value,
    patch_line=st.one_of(_hostile, _value),
)
def test_exported_scripts_keep_every_value_as_data(
    tmp_path: Path, ids: list[str], statement: str, patch_line: str
) -> None:
    instance = SweInstance(
        **{
            **GOOD.__dict__,
            "fail_to_pass": tuple(ids),
            "pass_to_pass": (),
            "problem_statement": statement,
            "patch": GOOD.patch + patch_line.replace("\n", " ") + "\n",
        }
    )
    task = export_harbor_task(instance, tmp_path / "t", overwrite=True)
    # Bytes as bash reads them: read_text() would turn a "\r" inside a quoted id into "\n".
    test_sh = (task / "tests/test.sh").read_bytes().decode()
    for script in ("tests/test.sh", "solution/solve.sh"):
        subprocess.run(["bash", "-n", str(task / script)], check=True, timeout=30)
    # The ids line, run on its own, gives back exactly the ids, and pytest reads them after "--".
    [line] = [x for x in test_sh.split("\ntests=(", 1)[1:]]
    array = "tests=(" + line.split("\npython -m pytest", 1)[0]
    out = subprocess.run(
        ["bash", "-c", array + '\nprintf "%s\\0" "${tests[@]}"'],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.decode().split("\0")[:-1] == ids
    assert 'python -m pytest -rA -p no:cacheprovider -- "${tests[@]}"' in test_sh
    docker = (task / "environment/Dockerfile").read_bytes().decode()
    assert [line.split()[0] for line in docker.splitlines() if line] == [
        "#",
        "FROM",
        "RUN",
        "WORKDIR",
        "ENV",
        "RUN",
        "RUN",
        "RUN",
    ]
    assert import_harbor(task) == instance
    assert not Path("/tmp/envgym-pwned").exists()
