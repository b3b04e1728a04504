"""A run's directory on the team's Lustre is its own, as in a bucket: the identity guard and cleanup through the helper pod.

The cluster here is a stand-in that runs each helper pod's request with the pod's own program
(``toolkit.dirops``) against a directory — what a kubelet and the Lustre CSI mount would do —
so what is checked is the toolkit's side: which requests it sends, what it makes of the answers,
that it deletes only its own helper pod, and bad input. The same flow on the real API server,
with the claim really bound and the pod really scheduled, is
tests/integration/test_lustre_identity_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from toolkit import dirops
from toolkit.errors import FieldError
from workloads import runs
from workloads.planning.planner import Overrides
from workloads.render import volume_helper
from workloads.runs import identity as ident
from workloads.runs import volume_store

SPEC = load_spec(EXAMPLES_DIR / "tpu7x-multislice.yaml")  # lustre: ironwood-ckpt, ip set; team llm


class Info:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class Playing:
    """A cluster whose kubelet runs helper pods with their own program against ``root`` (the claim's volume)."""

    context = "gke_p_us-central1_c"

    def __init__(self, root: Path, *, bound: bool = True) -> None:
        self.root, self.bound = root, bound
        self.pods: dict[str, dict[str, Any]] = {}
        self.logs_of: dict[str, str] = {}
        self.deleted: list[str] = []
        self.created = 0
        self.applied: list[dict] = []

    def resource(self, api_version: str, kind: str) -> Info:
        return Info(kind)

    def get(self, info: Info, name: str, namespace: str | None = None) -> dict | None:
        if info.kind == "PersistentVolumeClaim":
            return {"status": {"phase": "Bound"}} if self.bound else None
        return self.pods.get(name)

    def create(self, pod: dict, *, dry_run: bool = False, **_) -> dict:
        if dry_run:  # the run service's in-place capability probe: a JobSet whose gate is on
            assert pod["kind"] == "JobSet"
            return pod
        self.created += 1
        request = volume_helper.request_of(pod)
        assert request is not None and pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "tpu-gke-toolkit-lustre"
        mount = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
        self.logs_of[pod["metadata"]["name"]] = dirops.result_line(dirops.handle(request, {mount: str(self.root)}))
        live = {**pod, "metadata": {**pod["metadata"], "uid": f"uid-{self.created}"}, "status": {"phase": "Succeeded"}}
        self.pods[pod["metadata"]["name"]] = live
        return live

    def logs(self, namespace: str, name: str):
        yield self.logs_of[name]

    def delete_owned(self, permit, info, name, namespace, dry_run=False):
        from toolkit import ledger

        ledger.require(permit, ledger.Kind.HELPER_POD, f"{namespace}/{name}")
        self.deleted.append(name)
        del self.pods[name]

    # the run service's side
    def find_run(self, namespace, name):
        return None

    def apply(self, objects, **_):
        self.applied.extend(objects)


def _plan(recipe: str = "maxtext-6b", name: str = "exp1", **kw):
    return runs.plan(recipe, SPEC, Overrides(name=name, slices=2, checkpoint_storage="lustre", **kw))


def _identity(root: Path, run: str) -> dict | None:
    p = root / "llm" / run / ident.IDENTITY
    return json.loads(p.read_text()) if p.exists() else None


def test_the_store_is_the_runs_directory_on_the_teams_lustre(tmp_path: Path) -> None:
    plan = _plan()
    store = runs.service.checkpoint_store(Playing(tmp_path), plan)
    assert isinstance(store, volume_store.VolumeStore) and store.where == "lustre:ironwood-ckpt/llm/exp1/"
    assert ident.lustre_dir(plan) == "llm/exp1/" and ident.guarded(plan)


def test_on_lustre_another_run_under_the_name_is_refused(tmp_path: Path) -> None:
    cluster = Playing(tmp_path)
    sub = runs.apply(cluster, _plan())
    assert sub.checkpoints.state == "new" and cluster.applied
    assert _identity(tmp_path, "exp1")["recipe"] == "maxtext-6b"
    assert cluster.deleted == list(cluster.logs_of) and cluster.pods == {}  # every helper pod it made, and only those, gone
    (tmp_path / "llm/exp1/checkpoints/99/items").mkdir(parents=True)  # the run trained, then was deleted
    other = Playing(tmp_path)
    with pytest.raises(FieldError) as e:
        runs.apply(other, _plan("gpt3-6b"))
    assert str(e.value).startswith("--name: lustre:ironwood-ckpt/llm/exp1/checkpoints/ belongs to run exp1 (maxtext-6b") and other.applied == []
    again = Playing(tmp_path)
    assert runs.apply(again, _plan()).checkpoints.state == "same" and again.applied


def test_foreign_checkpoints_on_lustre_are_read_not_adopted(tmp_path: Path) -> None:
    (tmp_path / "llm/llama-base/checkpoints/0/items").mkdir(parents=True)
    cluster = Playing(tmp_path)
    with pytest.raises(FieldError, match="no toolkit run recorded"):
        runs.apply(cluster, _plan(name="llama-base"))
    sub = runs.apply(cluster, _plan(name="llama-base"), resume=True)
    assert sub.checkpoints.state == "foreign" and _identity(tmp_path, "llama-base") is None


def test_a_claim_that_is_not_bound_is_one_line_and_nothing_applied(tmp_path: Path) -> None:
    cluster = Playing(tmp_path, bound=False)
    with pytest.raises(FieldError) as e:
        runs.apply(cluster, _plan())
    assert e.value.field == "--checkpoint-storage" and "queues apply" in str(e.value) and "\n" not in str(e.value)
    assert cluster.applied == [] and cluster.created == 0


def test_a_helper_pod_without_an_answer_is_a_cluster_error(tmp_path: Path) -> None:
    cluster = Playing(tmp_path)
    cluster.logs = lambda ns, name: iter(["exec /usr/bin/python3: no such file or directory\n"])  # type: ignore[method-assign]
    with pytest.raises(volume_store.VolumeError) as e:
        runs.apply(cluster, _plan())
    assert e.value.exit_code == 3 and "without an answer" in str(e.value) and cluster.applied == [] and cluster.pods == {}


def test_dry_run_says_it_checks_lustre_through_a_helper_pod() -> None:
    line = runs.service.checkpoint_check(_plan())
    assert line.startswith("would check lustre:ironwood-ckpt/llm/exp1/tgk-run.json and lustre:ironwood-ckpt/llm/exp1/checkpoints/ (through a helper pod")


def test_cleanup_surveys_and_deletes_on_lustre_by_the_ledger(tmp_path: Path) -> None:
    from workloads.cluster import cleanup as cl
    from workloads.runs import cleanup as svc

    cluster = Playing(tmp_path)
    runs.apply(cluster, _plan(name="old"))  # the toolkit made llm/old/
    for d in ("llm/old/checkpoints/5/items", "llm/old/metrics", "llm/old/tensorboard", "llm/base/checkpoints/0/items"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "f").write_bytes(b"x")
    scope = svc.scope(SPEC, checkpoints=True, older_than="0s", team="llm")
    (v,) = scope.lustre
    assert (v.namespace, v.claim, v.location) == ("llm", "tpu-gke-toolkit-lustre", "lustre:ironwood-ckpt/")
    found = {d.run: d for d in svc.lustre_dirs(cluster, v)}
    assert set(found) == {"old", "base"} and found["old"].owner == "old" and found["base"].owner is None
    plan = cl.choose([], [], now=9e9, older_than=0, checkpoints=[cl.CheckpointDir(d) for d in found.values()], retention=0)
    assert [c.run for c in plan.checkpoints] == ["old"]
    assert "no tgk-run.json beside it" in dict(plan.kept)["lustre:ironwood-ckpt/llm/base/"]
    assert svc.delete_lustre(cluster, v, plan.checkpoints[0]) == 2
    assert sorted(p.name for p in (tmp_path / "llm/old").iterdir()) == ["tensorboard", "tgk-run.json"]
    assert (tmp_path / "llm/base/checkpoints/0/items/f").exists()  # the converted checkpoint stays
