"""The store on SQLite and on a real PostgreSQL (initdb/pg_ctl on 127.0.0.1), and its exports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from envgym import registry
from envgym.bundle import Bundle, load_bundle
from envgym.models.kept import decode_kept
from envgym.policy import Turn
from envgym.rollout import EpisodeResult, RecordBuilder
from envgym.store import Store, StoreError, default_url
from envgym.store.schema import Base

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = list(args) if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (the Debian ``postgresql`` package)."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail("PostgreSQL is not installed: apt-get install -y postgresql")
    # Under /tmp itself: pytest's tmp dirs are root-only and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="envgym-pg-"))
    data = root / "data"
    data.mkdir()
    if os.getuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    port = _free_port()
    _as_postgres(
        str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
    )
    _as_postgres(
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(data),
        "-w",
        "-l",
        str(root / "log"),
        "-o",
        f"-h 127.0.0.1 -p {port} -k {root}",
        "start",
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'envgym.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    db = Store(url)
    yield db
    if request.param == "postgresql":  # one server for the session: leave every table empty
        with db.engine.begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):  # children before parents
                conn.execute(table.delete())
    db.close()


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return load_bundle(registry.resolve_bundle("trip-planning-v0"))


def episode(
    task: str, sample: int, *, reward: float = 1.0, error: str | None = None
) -> EpisodeResult:
    b = RecordBuilder(model="m", policy_version=2)
    b.add(
        Turn(
            text="",
            prompt_ids=[1, 2, 3],
            token_ids=[7, 8],
            logprobs=[-0.25, -1.5],
            kept=[[7, 9], None],
        )
    )
    b.add(Turn(text="", prompt_ids=[1, 2, 3, 7, 8, 4], token_ids=[5], logprobs=[-0.125]))
    return EpisodeResult(
        task_id=task,
        sample=sample,
        reward=reward,
        reward_components={"budget": reward},
        terminated=True,
        error=error,
        error_message="boom" if error else "",
        turns=2,
        tool_calls=1,
        sampled_tokens=3,
        messages=[
            {"role": "user", "content": "plan ✈"},
            {"role": "assistant", "content": "", "tool_calls": []},
        ],
        context_dropped=[{"index": 1, "what": "reasoning", "reason": "r", "turn": 1}],
        report={"checks": []},
        record=b.finish(reward, {"budget": reward}),
    )


def open_eval(store: Store, bundle: Bundle, key: str = "sha256:e1") -> str:
    h = store.add_bundle(bundle)
    store.open_evaluation(
        key,
        bundle_hash=h,
        model="m",
        model_hash="sha256:m",
        config_hash="sha256:c",
        config={"t": 0.7},
    )
    return key


def test_bundles_tasks_validations_and_filters(store: Store, bundle: Bundle) -> None:
    h = store.add_bundle(bundle)
    assert store.add_bundle(bundle) == h == bundle.manifest.content_hash
    tasks = store.tasks(h)
    assert [t["id"] for t in tasks] == [t.id for t in bundle.tasks]
    store.record_validation(h, passed=True, report={"gold": True, "corruptions": [3, 3]})
    store.record_validation(
        h, passed=False, report={"why": "no-op passed"}, kind="noop", task_id="trip-001-d1"
    )
    v = store.validations(h)
    assert [(x.kind, x.task_id, x.passed, x.report) for x in v] == [
        ("check", None, True, {"gold": True, "corruptions": [3, 3]}),
        ("noop", "trip-001-d1", False, {"why": "no-op passed"}),
    ]
    store.record_filter(
        h, "trip-001-d1", model="smollm2", k=8, n=8, c=3, kept=True, params={"temperature": 1.0}
    )
    [f] = store.filter_results(h)
    assert (f.task_id, f.model, f.k, f.n, f.c, f.pass_rate, f.kept, f.params) == (
        "trip-001-d1",
        "smollm2",
        8,
        8,
        3,
        0.375,
        True,
        {"temperature": 1.0},
    )
    with pytest.raises(StoreError, match="0 ≤ c ≤ n"):
        store.record_filter(h, "trip-001-d1", model="m", k=1, n=2, c=3, kept=False)
    with pytest.raises(StoreError, match="no bundle sha256:nope"):
        store.record_validation("sha256:nope", passed=True, report={})


def test_episodes_round_trip_exactly_and_are_never_duplicated(store: Store, bundle: Bundle) -> None:
    key = open_eval(store, bundle)
    eps = [
        episode("trip-001-d1", 0),
        episode("trip-001-d1", 1, reward=0.0),
        episode("trip-002-d2", 0, error="policy"),
    ]
    assert [store.add_episode(key, e) for e in eps] == [True, True, True]
    assert store.add_episode(key, episode("trip-001-d1", 0, reward=0.0)) is False  # already there
    assert store.episode_keys(key) == {("trip-001-d1", 0), ("trip-001-d1", 1), ("trip-002-d2", 0)}
    assert store.episodes(key) == eps
    assert store.episodes(key, task_ids=["trip-001-d1"], samples=1) == eps[:1]
    assert store.evaluation(key).episodes == 3
    assert store.delete_errored(key) == 1
    assert store.episode_keys(key) == {("trip-001-d1", 0), ("trip-001-d1", 1)}
    store.set_summary(key, {"pass_at_k": {"1": 0.5}})
    assert store.evaluation(key).summary == {"pass_at_k": {"1": 0.5}}
    with pytest.raises(StoreError, match="no evaluation sha256:other"):
        store.add_episode("sha256:other", eps[0])


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (
            "record",
            '{"segments": [{"token_ids": [1, 2',
            "record is corrupted: Unterminated string|record is corrupted: Expecting",
        ),
        (
            "record",
            '{"segments": [{"token_ids": [1, 2], "loss_mask": [0], "logprobs": [0.0], "kept": [null], "turns": []}]}',
            "record is corrupted: ValueError: segment arrays have lengths",
        ),
        ("trajectory", "not json", "trajectory is corrupted"),
        ("trajectory", '{"task_id": "x"}', "record is corrupted: TypeError"),
    ],
)
def test_a_corrupted_row_is_named(
    store: Store, bundle: Bundle, column: str, value: str, message: str
) -> None:
    key = open_eval(store, bundle)
    store.add_episode(key, episode("trip-001-d1", 0))
    store.add_episode(key, episode("trip-002-d2", 1))
    with store.engine.begin() as conn:
        conn.execute(
            text(f"UPDATE episodes SET {column} = :v WHERE task_id = 'trip-002-d2'"), {"v": value}
        )
        [row_id] = conn.execute(
            text("SELECT id FROM episodes WHERE task_id = 'trip-002-d2'")
        ).scalars()
    with pytest.raises(StoreError, match=message) as info:
        store.episodes(key)
    assert f"episode {row_id} " in str(info.value) and "task 'trip-002-d2', sample 1" in str(
        info.value
    )
    assert len(store.episodes(key, task_ids=["trip-001-d1"])) == 1  # the rest stays readable


def test_bad_urls_and_unreachable_servers_are_clear_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(StoreError, match="not a database URL: 'not a url'"):
        Store("not a url")
    with pytest.raises(StoreError, match="cannot open the store at"):
        Store(f"postgresql://postgres@127.0.0.1:{_free_port()}/none")
    with pytest.raises(StoreError, match="no driver for database URL"):
        Store("mysql+nosuchdriver://x@127.0.0.1/db")
    monkeypatch.setenv("ENVGYM_DB", f"sqlite:///{tmp_path / 'x.db'}")
    assert default_url() == f"sqlite:///{tmp_path / 'x.db'}"
    Store().close()
    assert (tmp_path / "x.db").is_file()


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).close()
    with Store(url).engine.begin() as conn:
        conn.execute(text("UPDATE envgym_meta SET value = '0' WHERE key = 'schema_version'"))
    with pytest.raises(StoreError, match="schema version 0; this envgym uses 1"):
        Store(url)


def test_exports_load_with_hugging_face_datasets(
    tmp_path: Path, bundle: Bundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    key = open_eval(store, bundle)
    eps = [episode("trip-001-d1", 0), episode("trip-002-d2", 0, reward=0.0, error="env")]
    for e in eps:
        store.add_episode(key, e)
    assert store.export(tmp_path / "out.jsonl") == 2
    assert store.export(tmp_path / "out.parquet", key=key) == 2
    with pytest.raises(ValueError, match="export format must be one of jsonl, parquet"):
        store.export(tmp_path / "out.csv")
    for kind, name in (("json", "out.jsonl"), ("parquet", "out.parquet")):
        ds = datasets.load_dataset(
            kind, data_files=str(tmp_path / name), split="train", cache_dir=str(tmp_path / "hf")
        )
        assert len(ds) == 2
        first, second = ds[0], ds[1]
        assert (first["task_id"], first["passed"], first["reward"], first["error"]) == (
            "trip-001-d1",
            True,
            1.0,
            None,
        )
        assert (second["error"], second["passed"]) == ("env", False)
        seg = first["segments"][0]
        assert seg["token_ids"] == [1, 2, 3, 7, 8, 4, 5]
        assert seg["loss_mask"] == [0, 0, 0, 1, 1, 0, 1]
        assert seg["logprobs"] == [0.0, 0.0, 0.0, -0.25, -1.5, 0.0, -0.125]
        assert seg["turns"] == [[3, 5], [6, 7]]
        # record v2: kept sets decoded (null = not truncated); the second turn reported none:
        # "unknown"; the record's compact codes beside them
        kept = json.loads(seg["kept"])
        assert kept == [None, None, None, [7, 9], None, None, "unknown"]
        assert [decode_kept(k) for k in json.loads(seg["kept_codes"])] == kept
        assert seg["full_logprobs"] == [0.0, 0.0, 0.0, None, None, 0.0, None]  # not reported
        info = seg["turn_info"]
        assert [t["finish_reason"] for t in info] == ["stop", "stop"]
        assert info[0]["logprob_kind"] == "sampled" and info[0]["temperature"] is None
        assert json.loads(first["messages"])[0]["content"] == "plan ✈"
    store.close()
