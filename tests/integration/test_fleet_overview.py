"""`list` and `queues status` through a fleet: every member read, every row naming its cluster.

A fleet of its own (a MultiKueue manager and two workers, ``local up --fleet``, state dirs under
``<test state>-fleet-overview``): two runs submitted to the manager fill both workers' one slice
each, a third waits on the manager (MultiKueue has nowhere to put it). `list` shows the two on
the workers that run them (the manager's copies give way) and the third on the manager;
`queues status` shows each worker's quota in use and the waiting run on the manager's queue.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_fleet import write_fleet
from tests.support.cli import cli, run_module
from tests.support.local_cluster import own_state_dir, wait_for


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    from workloads.local.fleet import LocalFleet

    lf = LocalFleet(own_state_dir("fleet-overview"), progress=lambda m: sys.stderr.write(f"[fleet] {m}\n"))
    path = write_fleet(tmp_path_factory.mktemp("fleet"), lf.root)
    r = run_module("workloads", "local", "up", "--fleet", str(path), "--state-dir", str(lf.root), "--timeout", "600", "-o", "json", timeout=1200)
    if r.returncode != 0:
        lf.down()
        pytest.fail(f"the local fleet could not start: {r.stderr.strip()[-500:]}", pytrace=False)
    try:
        yield lf, path
    finally:
        lf.down()


def _json(path: Path, *args: str) -> dict:
    done = cli("workloads", *args, "--spec", path, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_and_queues_status_span_the_fleet_and_name_each_cluster(fleet) -> None:
    _, path = fleet
    tag = secrets.token_hex(2)
    names = [f"fl-{i}-{tag}" for i in range(3)]
    for n in names:
        done = cli("workloads", "submit", "maxtext-6b", "--spec", path, "--name", n, "--rehearse-seconds", "120", "--no-wait")
        assert done.returncode == 0, done.stderr

    def placed() -> dict | None:
        got = _json(path, "list")
        mine = {r["name"]: r for r in got["runs"] if tag in r["name"]}
        on_workers = [r for r in mine.values() if r["cluster"] in ("west", "east")]
        return got if len(mine) == 3 and len(on_workers) == 2 else None

    got = wait_for(placed, 180, "two runs dispatched to the workers, one waiting on the manager")
    mine = {r["name"]: r for r in got["runs"] if tag in r["name"]}
    assert sorted(r["cluster"] for r in mine.values()) == ["east", "fleet-mgr", "west"]  # one row per run: the manager's copies gave way
    waiting = next(r for r in mine.values() if r["cluster"] == "fleet-mgr")
    assert waiting["state"] == "Queued"
    only_west = _json(path, "list", "--cluster", "west")
    assert {r["cluster"] for r in only_west["runs"]} == {"west"}

    status = _json(path, "queues", "status")
    clusters = {f["cluster"] for f in status["flavors"]}
    assert {"fleet-mgr", "west", "east"} <= clusters
    for worker in ("west", "east"):
        (row,) = [f for f in status["flavors"] if f["cluster"] == worker and f["team"] == "research"]
        assert row["nominal"] == 16 and row["in_use"] == 16
    assert [p["run"] for p in status["pending"] if tag in p["run"]] == [waiting["name"]]
    assert next(p for p in status["pending"] if tag in p["run"])["cluster"] == "fleet-mgr"
