"""`python -m workloads` run commands, as a user sees them (run in process: tests/support/cli.py).

The bad-input corpus (tests/bad_runs/cases.yaml): exit 2, exactly one stderr
line naming the flag, no traceback, nothing written or applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support import EXAMPLES, cli
from workloads.render import yamlio

# Runs applied to fake clusters keep their checkpoint directory's identity in memory (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("memory_buckets")

CASES = yaml.safe_load((Path(__file__).resolve().parent / "bad_runs" / "cases.yaml").read_text())


def _spec_args(case: dict) -> list[str]:
    if "spec_file" in case:  # a spec of the corpus's own (tests/bad_runs/specs/)
        return ["--spec", str(Path(__file__).resolve().parent / "bad_runs" / "specs" / case["spec_file"])]
    return ["--spec", str(EXAMPLES / f"{case['spec']}.yaml")] if "spec" in case else []


def _assert_one_line_error(r, field: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert field in lines[0], lines[0]
    assert r.stdout == ""


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 20
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_submit_applies_nothing(case: dict, tmp_path: Path) -> None:
    # A kubeconfig that does not exist: reaching the cluster step would exit 3
    # with "no kubeconfig", so exit 2 with the field proves planning failed first.
    r = cli("workloads", "submit", *case["args"], *_spec_args(case), "--kubeconfig", str(tmp_path / "none"))
    _assert_one_line_error(r, case["field"])
    assert "kubeconfig" not in r.stderr or case["field"] == "--kubeconfig"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_render_writes_nothing(case: dict, tmp_path: Path) -> None:
    out = tmp_path / "tree"
    r = cli("workloads", "render", *case["args"], *_spec_args(case), "--out", str(out))
    _assert_one_line_error(r, case["field"])
    assert not out.exists()


@pytest.mark.parametrize(
    "args, field",
    [
        (["submit", "maxtext-6b", "--timeout", "-5"], "'--timeout'"),
        (["submit", "maxtext-6b", "--rehearse-seconds", "-1"], "'--rehearse-seconds'"),
        (["local", "up", "--timeout", "0"], "'--timeout'"),
    ],
    ids=["submit-timeout-negative", "rehearse-seconds-negative", "local-up-timeout-zero"],
)
def test_bad_flags_outside_the_plan_are_one_line(args: list[str], field: str, tmp_path: Path) -> None:
    r = cli("workloads", *args, "--kubeconfig" if args[0] == "submit" else "--state-dir", str(tmp_path / "none"))
    _assert_one_line_error(r, field)
    assert not (tmp_path / "none").exists()


# ------------------------------------------------------------- good paths


def test_recipes_json() -> None:
    r = cli("workloads", "recipes", "-o", "json")
    assert r.returncode == 0, r.stderr
    names = {d["name"] for d in json.loads(r.stdout)}
    assert {"maxtext-6b", "llama3-8b", "hello-tpu", "gpt3-6b"} <= names


def test_submit_dry_run_yaml_and_json_agree() -> None:
    args = ["submit", "maxtext-6b", "--slices", "2", "--name", "dry", "--dry-run"]
    y = cli("workloads", *args)
    j = cli("workloads", *args, "-o", "json")
    assert y.returncode == 0 and j.returncode == 0, y.stderr + j.stderr
    docs = yamlio.load_all(y.stdout)
    assert docs == json.loads(j.stdout)
    assert [d["kind"] for d in docs] == ["JobSet"]  # Kueue objects come from `queues apply`
    assert docs[0]["spec"]["replicatedJobs"][0]["replicas"] == 2


def test_generated_names_differ_between_submits() -> None:
    a = json.loads(cli("workloads", "submit", "hello-tpu", "--dry-run", "-o", "json").stdout)
    b = json.loads(cli("workloads", "submit", "hello-tpu", "--dry-run", "-o", "json").stdout)
    assert a[0]["metadata"]["name"].startswith("hello-tpu-")
    assert a[0]["metadata"]["name"] != b[0]["metadata"]["name"]


def test_queues_apply_dry_run() -> None:
    r = cli("workloads", "queues", "apply", "--dry-run", "-o", "json", "--spec", str(EXAMPLES / "v6e-reservation.yaml"))
    assert r.returncode == 0, r.stderr
    kinds = [o["kind"] for o in json.loads(r.stdout)]
    assert kinds.count("ClusterQueue") == 2 and kinds.count("LocalQueue") == 2 and kinds.count("PriorityClass") == 5


def test_render_json(tmp_path: Path) -> None:
    r = cli("workloads", "render", "llama3-8b", "--name", "rj", "--out", str(tmp_path), "-o", "json", "--spec", str(EXAMPLES / "v6e-reservation.yaml"))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["run"] == "rj" and Path(data["overlay"]).is_dir()
    assert (tmp_path / "base" / "jobset" / "jobset.yaml").exists()


# ------------------------------------------- real submit with a fake Cluster


class FakeCluster:
    instances: list[FakeCluster] = []

    def __init__(self, admitted: bool = True) -> None:
        self.applied: list[dict] = []
        self.managers: list[str] = []
        self.waited: list[tuple[str, str]] = []
        self.admitted = admitted
        FakeCluster.instances.append(self)

    @classmethod
    def connect(cls, kubeconfig=None, context=None, **_):
        return cls()

    def find_run(self, namespace, name):
        return None  # nothing under that name yet: submit applies

    def apply(self, objects, *, field_manager="tpu-gke-toolkit", **_):
        self.applied.extend(objects)
        self.managers.append(field_manager)
        return objects

    def wait_admitted(self, namespace, name, *, timeout, on_progress=None, **_):
        from workloads.cluster.client import AdmissionResult

        self.waited.append((namespace, name))
        if on_progress:
            on_progress("QuotaReserved")
        return AdmissionResult(
            admitted=self.admitted,
            workload=f"jobset-{name}-abc",
            state="Admitted" if self.admitted else "Pending",
            flavors={"slice": "v5e-4x4"},
            reason="" if self.admitted else "no quota",
            waited_seconds=1.0,
        )


def _invoke(monkeypatch, capsys, argv: list[str]) -> tuple[int, str, str]:
    import workloads.cluster.client
    from toolkit.clikit import run
    from workloads.cli import _register, app

    FakeCluster.instances.clear()
    monkeypatch.setattr(workloads.cluster.client, "Cluster", FakeCluster)
    monkeypatch.delenv("TGK_SPEC", raising=False)
    _register()
    code = run(app, argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_applies_exactly_the_dry_run_objects(monkeypatch, capsys) -> None:
    code, dry, _ = _invoke(monkeypatch, capsys, ["submit", "maxtext-6b", "--slices", "2", "--name", "real", "--dry-run", "-o", "json"])
    assert code == 0
    code, out, err = _invoke(monkeypatch, capsys, ["submit", "maxtext-6b", "--slices", "2", "--name", "real", "-o", "json"])
    assert code == 0, err
    (fake,) = FakeCluster.instances
    assert fake.applied == json.loads(dry)
    assert fake.managers == ["tpu-gke-toolkit"]
    assert fake.waited == [("research", "real")]
    assert json.loads(out)["admission"]["admitted"] is True


def test_submit_no_wait_and_not_admitted(monkeypatch, capsys) -> None:
    code, _, _ = _invoke(monkeypatch, capsys, ["submit", "hello-tpu", "--name", "nw", "--no-wait"])
    assert code == 0 and FakeCluster.instances[0].waited == []

    monkeypatch.setattr(FakeCluster, "connect", classmethod(lambda cls, *a, **k: cls(admitted=False)))
    import workloads.cluster.client
    from toolkit.clikit import run
    from workloads.cli import app

    monkeypatch.setattr(workloads.cluster.client, "Cluster", FakeCluster)
    code = run(app, ["submit", "hello-tpu", "--name", "na", "--timeout", "1"])
    _, err = capsys.readouterr()
    assert code == 4 and "not admitted" in err and "no quota" in err


def test_bad_input_never_connects(monkeypatch, capsys) -> None:
    code, _, err = _invoke(monkeypatch, capsys, ["submit", "maxtext-6b", "--slices", "9"])
    assert code == 2 and "--slices" in err
    assert FakeCluster.instances == []


def test_queues_apply_real(monkeypatch, capsys) -> None:
    code, out, _ = _invoke(monkeypatch, capsys, ["queues", "apply", "-o", "json"])
    assert code == 0
    (fake,) = FakeCluster.instances
    assert [o["kind"] for o in fake.applied][:5] == ["PriorityClass"] * 5
    assert len(json.loads(out)["applied"]) == len(fake.applied)


@pytest.mark.parametrize("encoding", ["utf-16", "gzip"])
def test_a_kubeconfig_that_is_not_utf8_text_is_bad_input(encoding: str, tmp_path: Path) -> None:
    import gzip

    text = "apiVersion: v1\nkind: Config\nclusters: []\n"
    kc = tmp_path / "kc"
    kc.write_bytes(text.encode("utf-16") if encoding == "utf-16" else gzip.compress(text.encode()))
    r = cli("workloads", "status", "r1", "--kubeconfig", str(kc))
    _assert_one_line_error(r, "--kubeconfig")
