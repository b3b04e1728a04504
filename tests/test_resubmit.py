"""Resubmitting under an existing name: the digest, the stamp and the verdict (pure), and submit's answer."""

from __future__ import annotations

import copy
import json

from toolkit.names import TGK_SUBMISSION_ANNOTATION
from workloads.render import submission as resubmit

OBJS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "r"}},
    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "r", "labels": {"a": "b"}}, "spec": {"x": [1, 2]}},
]


def test_digest_is_stable_and_ignores_its_own_stamp() -> None:
    stamped = resubmit.stamp(OBJS, "JobSet")
    assert resubmit.digest(OBJS) == resubmit.digest(copy.deepcopy(OBJS)) == resubmit.digest(stamped)
    assert stamped[1]["metadata"]["annotations"] == {TGK_SUBMISSION_ANNOTATION: resubmit.digest(OBJS)}
    assert "annotations" not in stamped[0]["metadata"]  # only the run's top-level object
    assert "annotations" not in OBJS[1]["metadata"]  # the input is left as it is


def test_any_change_changes_the_digest() -> None:
    changed = copy.deepcopy(OBJS)
    changed[1]["spec"]["x"].append(3)
    assert resubmit.digest(changed) != resubmit.digest(OBJS)


def test_verdicts() -> None:
    live = resubmit.stamp(OBJS, "JobSet")[1]
    assert resubmit.verdict(None, OBJS) == "new"
    assert resubmit.verdict(live, OBJS) == "same"
    changed = copy.deepcopy(OBJS)
    changed[1]["metadata"]["labels"]["a"] = "c"
    assert resubmit.verdict(live, changed) == "changed"
    assert resubmit.verdict({"metadata": {"name": "r"}}, OBJS) == "foreign"


# ---------------------------------------------------------------- through submit, with a fake cluster


def _submit(monkeypatch, capsys, existing, argv):
    import workloads.cluster.client
    from toolkit.clikit import run
    from workloads.cli import _register, app
    from workloads.cluster import runkinds, status

    applied: list[dict] = []

    class Fake:
        @classmethod
        def connect(cls, *a, **k):
            return cls()

        def find_run(self, namespace, name):
            return (runkinds.JOBSET, existing) if existing is not None else None

        def run_status(self, namespace, name):
            return status.run_status(namespace, name, existing, None, [])

        def apply(self, objects, **_):
            applied.extend(objects)

        def wait_admitted(self, *a, **k):
            raise AssertionError("must not wait for a run it did not submit")

    monkeypatch.setattr(workloads.cluster.client, "Cluster", Fake)
    monkeypatch.delenv("TGK_SPEC", raising=False)
    _register()
    code = run(app, argv)
    out, err = capsys.readouterr()
    return code, out, err, applied


def test_identical_resubmission_applies_nothing_and_reports_the_run(monkeypatch, capsys) -> None:
    argv = ["submit", "hello-tpu", "--name", "again", "--dry-run", "-o", "json"]
    code, out, _, _ = _submit(monkeypatch, capsys, None, argv)
    assert code == 0
    live = next(o for o in json.loads(out) if o["kind"] == "JobSet")
    code, out, err, applied = _submit(monkeypatch, capsys, live, argv[:-3])
    assert code == 0, err
    assert applied == []
    assert "already submitted with these options; nothing applied" in err
    code, out, err, applied = _submit(monkeypatch, capsys, live, [*argv[:-3], "-o", "json"])
    assert code == 0 and applied == [] and json.loads(out)["existing"] is True


def test_changed_or_foreign_resubmission_is_one_line_and_applies_nothing(monkeypatch, capsys) -> None:
    argv = ["submit", "hello-tpu", "--name", "again", "--dry-run", "-o", "json"]
    _, out, _, _ = _submit(monkeypatch, capsys, None, argv)
    live = next(o for o in json.loads(out) if o["kind"] == "JobSet")
    for existing, argv2, why in (
        (live, ["submit", "hello-tpu", "--name", "again", "--priority", "high"], "with different options"),
        ({**live, "metadata": {"name": "again"}}, ["submit", "hello-tpu", "--name", "again"], "was not submitted by this toolkit"),
    ):
        code, out, err, applied = _submit(monkeypatch, capsys, existing, argv2)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and applied == [] and out == ""
        assert len(lines) == 1 and lines[0].startswith("error: --name: JobSet research/again already exists") and why in lines[0], err
