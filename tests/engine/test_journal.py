"""The journal: group-committed durable writes in the order the runner's safety needs."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import engine.rundir.journal as journal_module
from engine.rundir.journal import Group, Journal


@pytest.fixture(params=["syncfs", "fsync-per-file"])
def flush_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fsync-per-file":
        monkeypatch.setattr(journal_module, "_SYNCFS", None)
    elif journal_module._SYNCFS is None:
        pytest.skip("no syncfs on this platform")
    return str(request.param)


def test_groups_land_in_their_order_and_only_then_say_so(
    tmp_path: Path, flush_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "records").mkdir()
    events: list[str] = []
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)

    async def go() -> None:
        j = Journal(tmp_path)
        await j.replace_now(tmp_path / "records" / "p1.json", b'{"state": "in_flight"}\n')
        assert json.loads((tmp_path / "records" / "p1.json").read_bytes())["state"] == "in_flight"
        tasks = []
        for i in range(20):
            group = (
                Group()
                .create(tmp_path / "raw" / f"p{i}.json", b'{"raw": %d}' % i)
                .append(tmp_path / "responses.jsonl", b'{"prompt_id": "p%d"}\n' % i)
                .replace(tmp_path / "records" / f"p{i}.json", b'{"state": "success"}\n')
            )

            def durable(i: int = i) -> None:
                # Everything before the record is on disk when the runner is told.
                assert (tmp_path / "raw" / f"p{i}.json").read_bytes() == b'{"raw": %d}' % i
                assert b'"p%d"' % i in (tmp_path / "responses.jsonl").read_bytes()
                events.append(f"p{i}")

            tasks.append(j.commit_later(group, durable))
        await j.drain()
        assert all(t.done() for t in tasks)
        j.close()

    asyncio.run(go())
    assert sorted(events) == sorted(f"p{i}" for i in range(20))
    lines = (tmp_path / "responses.jsonl").read_bytes().splitlines()
    assert len(lines) == 20 and len(set(lines)) == 20
    for i in range(20):
        assert json.loads((tmp_path / "records" / f"p{i}.json").read_bytes()) == {
            "state": "success"
        }
    assert not list(tmp_path.rglob(".*.tmp"))
    if flush_mode == "fsync-per-file":
        assert fsyncs, "without syncfs every touched file is fsynced"
    else:
        assert not fsyncs, "with syncfs one flush of the file system covers the group"


def test_a_failed_write_is_kept_and_raised_by_drain(tmp_path: Path, flush_mode: str) -> None:
    async def go() -> None:
        j = Journal(tmp_path)
        task = j.commit_later(Group().create(tmp_path / "missing-dir" / "raw.json", b"{}"))
        with pytest.raises(FileNotFoundError):
            await j.drain()
        assert isinstance(j.failure, FileNotFoundError)
        assert task.done()
        j.close()

    asyncio.run(go())


@pytest.fixture(params=["exchange", "plain-rename"])
def rename_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "plain-rename":
        monkeypatch.setattr(journal_module, "_RENAMEAT2", None)
    elif journal_module._RENAMEAT2 is None:
        pytest.skip("no renameat2 on this platform")
    return str(request.param)


def _replacements_over_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every os.replace the journal makes onto a file that exists (which frees that file)."""
    over: list[str] = []
    real_replace = os.replace

    def watching_replace(src: str, dst: str | Path) -> None:
        if os.path.exists(dst):
            over.append(str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)
    return over


def test_replacing_records_frees_no_file_and_leaves_no_temporary(
    tmp_path: Path, rename_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record replaced (in_flight, then success) ends with exactly its last bytes, a longer
    displaced file written over with shorter bytes keeps none of its tail, and with renameat2
    no replacement goes over an existing file (freeing it stalls the event loop)."""
    (tmp_path / "records").mkdir()
    over = _replacements_over_files(monkeypatch)
    paths = [tmp_path / "records" / f"p{i}.json" for i in range(12)]

    async def go() -> None:
        j = Journal(tmp_path, temporaries=4)
        for i, path in enumerate(paths):
            if i % 2:
                j.prepare(path, b'{"state":"in_flight","n":%d}\n' % i)
            await j.replace_now(path, b'{"state":"in_flight","n":%d}\n' % i)
        # Long records first, so that the files they displace are refilled with short ones.
        for i, path in enumerate(paths):
            j.commit_later(
                Group().replace(
                    path, b'{"state":"success","n":%d,"pad":"%s"}\n' % (i, b"x" * (200 - 10 * i))
                )
            )
        await j.drain()
        for i, path in enumerate(paths):
            await j.replace_now(path, b'{"n":%d}\n' % i)
        await j.drain()
        j.close()
        if rename_mode == "exchange":
            assert j.exchanged == 2 * len(paths)

    asyncio.run(go())
    for i, path in enumerate(paths):
        assert path.read_bytes() == b'{"n":%d}\n' % i
    assert not list(tmp_path.rglob(".*.tmp"))
    if rename_mode == "exchange":
        assert over == []
    else:
        assert len(over) == 2 * len(paths)


def test_raw_bodies_land_under_their_final_names_whole(tmp_path: Path, rename_mode: str) -> None:
    (tmp_path / "raw").mkdir()

    async def go() -> None:
        j = Journal(tmp_path, temporaries=2)
        for i in range(10):
            j.commit_later(
                Group().create(
                    tmp_path / "raw" / f"p{i}.attempt-1.json", b'{"raw": "%s"}' % (b"y" * i)
                )
            )
        await j.drain()
        j.close()

    asyncio.run(go())
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == sorted(
        f"p{i}.attempt-1.json" for i in range(10)
    )
    for i in range(10):
        assert (tmp_path / "raw" / f"p{i}.attempt-1.json").read_bytes() == b'{"raw": "%s"}' % (
            b"y" * i
        )


def test_temporaries_are_made_ahead_by_their_thread(tmp_path: Path) -> None:
    from engine.rundir.journal import Temporaries

    made = Temporaries(keep=3)
    try:
        assert made.take(tmp_path) is None  # nothing asked for here yet; now it is
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob(".*.tmp"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        ready = made.take(tmp_path)
        assert ready is not None
        name, fd, used = ready
        assert Path(name).parent == tmp_path and not used
        assert os.fstat(fd).st_size == 0
        os.write(fd, b"filled")
        os.close(fd)
        made.give_back(tmp_path, name)  # displaced by a replacement: reopened to be refilled
        made.wind_down()
    finally:
        left = made.close()
    assert set(left) <= {str(p) for p in tmp_path.glob(".*.tmp")}
    assert name not in left or Path(name).read_bytes() == b"filled"


def test_later_work_waits_for_the_records_waiting_for_their_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work off the requests' path runs once no in_flight record waits for its flush (here the
    longest it may wait is made long), one piece per turn of the loop; drain() runs the rest."""
    if journal_module._SYNCFS is None:
        pytest.skip("no syncfs on this platform")
    monkeypatch.setattr(journal_module, "LAZY_SECONDS", 60.0)
    release = threading.Event()
    real_syncfs = journal_module._SYNCFS

    def held_syncfs(fd: int) -> int:
        release.wait(30)
        return real_syncfs(fd)

    monkeypatch.setattr(journal_module, "_SYNCFS", held_syncfs)
    order: list[str] = []

    async def send(j: Journal) -> None:
        await j.replace_now(tmp_path / "p.json", b"{}\n")
        order.append("sent")  # as the runner does, in the same step

    async def go() -> None:
        j = Journal(tmp_path)
        request = asyncio.create_task(send(j))
        await asyncio.sleep(0.05)
        j.later(lambda: order.append("work 1"))
        j.later(lambda: order.append("work 2"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert order == [] and not request.done()
        release.set()
        await request
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["sent", "work 1", "work 2"]
        j.later(lambda: order.append("work 3"))
        await j.drain()
        assert order == ["sent", "work 1", "work 2", "work 3"]

        def fails() -> None:
            raise ZeroDivisionError

        j.later(fails)
        with pytest.raises(ZeroDivisionError):
            await j.drain()
        j.close()

    asyncio.run(go())


def test_stats_split_the_in_flight_records_wait(tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        j = Journal(tmp_path)
        for i in range(5):
            await j.replace_now(tmp_path / f"p{i}.json", b"{}\n")
        await j.drain()
        j.close()
        return j.stats()

    stats = asyncio.run(go())
    assert stats["in_flight_records"] == 5
    flush, split = stats["flush_ms"], stats["mean_wait_split_ms"]
    assert isinstance(flush, dict) and isinstance(split, dict)
    assert 0 <= flush["p50"] <= flush["p90"] <= flush["p99"] <= flush["max"]
    assert set(split) == {"to_begin", "flush", "to_resume"}
    assert all(v >= 0 for v in split.values())
    assert sum(split.values()) <= stats["mean_wait_ms"] + 0.01
