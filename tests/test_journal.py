"""The journal: group-committed durable writes in the order the runner's safety needs."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

import engine.journal as journal_module
from engine.journal import Group, Journal


@pytest.fixture(params=["syncfs", "fsync-per-file"])
def flush_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fsync-per-file":
        monkeypatch.setattr(journal_module, "_SYNCFS", None)
    elif journal_module._SYNCFS is None:
        pytest.skip("no syncfs on this platform")
    return str(request.param)


def test_groups_land_in_their_order_and_only_then_say_so(tmp_path: Path, flush_mode: str,
                                                         monkeypatch: pytest.MonkeyPatch
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
        assert json.loads((tmp_path / "records" / "p1.json").read_bytes())["state"] == \
            "in_flight"
        tasks = []
        for i in range(20):
            group = (Group().create(tmp_path / "raw" / f"p{i}.json", b'{"raw": %d}' % i)
                     .append(tmp_path / "responses.jsonl", b'{"prompt_id": "p%d"}\n' % i)
                     .replace(tmp_path / "records" / f"p{i}.json", b'{"state": "success"}\n'))

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
            "state": "success"}
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
