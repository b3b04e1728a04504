"""The run service below the CLI (workloads.runs) and the run options declared once (Overrides).

* a notebook submits a run in a few lines, without Typer, against the recording fake API
  server: what it applies is what `submit --dry-run` prints, and it gets typed results back;
* the cluster's hook is chosen by its kubeconfig context; neither the service nor the CLI
  module that submits names the local cluster's package;
* every field of Overrides with a flag is an option of `render` and `submit`, and a new
  field becomes one with no other edit; the help quotes the defaults the planner applies.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.spec import EXAMPLES_DIR, PRIORITY_CLASSES, load_spec
from tests.support.fake_apiserver import serve
from toolkit.names import TGK_SUBMISSION_ANNOTATION
from workloads import runs
from workloads.planning import defaults
from workloads.planning.model import RUNTIMES
from workloads.planning.overrides import Overrides, _flag, flag_of

REPO = Path(__file__).resolve().parent.parent
# Runs applied to fake clusters keep their checkpoint directory's identity in memory (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("memory_buckets")

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"

NOTEBOOK = """
import json, sys
from infra.spec import load_spec
from workloads import runs
from workloads.cluster.client import Cluster

plan = runs.plan("hello-tpu", load_spec("examples/default.yaml"), runs.Overrides(name="nb-run", steps=20))
result = runs.submit(Cluster.connect(sys.argv[1]), plan, timeout=30)

print(json.dumps({"refs": result.refs, "admitted": result.admission.admitted, "flavors": result.admission.flavors,
                  "existing": result.existing, "typer": any(m.split(".")[0] in ("typer", "click") for m in sys.modules)}))
"""


def _kueue_routes(api, applied: dict[str, dict]) -> None:
    """A JobSet store behind GET/PATCH, and Kueue admitting whatever was applied."""

    def patch(query, body):
        obj = json.loads(body)
        obj["metadata"]["uid"] = "uid-nb"
        obj["metadata"]["resourceVersion"] = "1"
        applied[obj["metadata"]["name"]] = obj
        return 200, obj

    def get(name):
        return lambda q, b: (200, applied[name]) if name in applied else (404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"})

    api.routes[("PATCH", f"{JOBSETS}/nb-run")] = patch
    api.routes[("GET", f"{JOBSETS}/nb-run")] = get("nb-run")
    api.json("GET", "/apis/kueue.x-k8s.io", {"kind": "APIGroup", "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}})
    api.json(
        "GET",
        "/apis/kueue.x-k8s.io/v1beta2",
        {"kind": "APIResourceList", "resources": [{"name": "workloads", "kind": "Workload", "namespaced": True}]},
    )
    admitted = {
        "metadata": {"name": "jobset-nb-run-1", "namespace": "research", "resourceVersion": "2", "labels": {"kueue.x-k8s.io/job-uid": "uid-nb"}},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True", "reason": "Admitted"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "slice", "flavors": {"google.com/tpu": "v5e-4x4"}}]},
        },
    }
    api.routes[("GET", WORKLOADS)] = lambda q, b: (200, {"metadata": {"resourceVersion": "2"}, "items": [admitted] if applied else []})


def test_a_notebook_submits_a_run_in_a_few_lines_without_typer(tmp_path: Path) -> None:
    applied: dict[str, dict] = {}
    with serve() as api:
        _kueue_routes(api, applied)
        kubeconfig = api.kubeconfig(tmp_path, namespace="research")
        r = subprocess.run([sys.executable, "-c", NOTEBOOK, str(kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out == {
        "refs": [{"kind": "JobSet", "name": "nb-run", "namespace": "research"}],
        "admitted": True,
        "flavors": {"slice": "v5e-4x4"},
        "existing": None,
        "typer": False,
    }
    # Applied server-side as the toolkit, and exactly what `submit --dry-run` of the same options prints.
    (patch,) = [s for s in api.seen if s["method"] == "PATCH"]
    assert patch["query"] == {"fieldManager": "tpu-gke-toolkit", "force": "false"}
    plan = runs.plan("hello-tpu", load_spec(EXAMPLES_DIR / "default.yaml"), Overrides(name="nb-run", steps=20))
    assert [json.loads(patch["body"])] == runs.manifests(plan)


# ------------------------------------------------------------ the service with a fake cluster


class Recording:
    """A cluster that records what is applied; ``live`` is the run already under the name."""

    def __init__(self, context: str | None = None, live: dict | None = None) -> None:
        self.context = context
        self.live = live
        self.applied: list[dict] = []

    def find_run(self, namespace, name):
        from workloads.cluster import runkinds

        return (runkinds.JOBSET, self.live) if self.live else None

    def run_status(self, namespace, name):
        from workloads.cluster import status

        return status.run_status(namespace, name, self.live, None, [])

    def apply(self, objects, **_):
        self.applied.extend(objects)


@pytest.fixture(scope="module")
def plan():
    return runs.plan("maxtext-6b", load_spec(EXAMPLES_DIR / "default.yaml"), Overrides(slices=2, name="svc"))


def test_apply_on_a_real_cluster_applies_the_manifests_as_rendered(plan) -> None:
    cluster = Recording(context="gke_p_us-west4_c")
    sub = runs.apply(cluster, plan)
    assert cluster.applied == runs.manifests(plan) == list(sub.applied)
    assert sub.existing is None and sub.admission is None and sub.note == ""
    assert sub.refs == [{"kind": "JobSet", "name": "svc", "namespace": "research"}]


def test_the_local_context_makes_the_run_a_rehearsal_through_its_hook(plan) -> None:
    from workloads.local.addons import REHEARSAL_LABEL

    cluster = Recording(context="tgk-local")
    sub = runs.apply(cluster, plan, rehearse_seconds=4)
    (js,) = cluster.applied
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][REHEARSAL_LABEL] == "true"
    assert sub.note.startswith("rehearsal on the local cluster: every worker Running for 4.0 s (--rehearse-seconds)")
    # Stamped again after the decoration: resubmitting the same rehearsal is recognised as the same run.
    again = runs.apply(Recording(context="tgk-local", live=js), plan, rehearse_seconds=4)
    assert again.applied == () and again.existing is not None and again.existing.kind == "JobSet"


def test_submit_does_not_wait_for_a_run_it_did_not_apply(plan) -> None:
    live = runs.manifests(plan)[0]

    class NoWait(Recording):
        def wait_admitted(self, *a, **k):
            raise AssertionError("waited for a run that was already there")

    sub = runs.submit(NoWait(live=live), plan, timeout=5)
    assert sub.existing is not None and sub.admission is None and sub.applied == ()


def test_hooks_are_found_by_context_not_named() -> None:
    from workloads.local import CONTEXT
    from workloads.local.runhooks import Rehearse
    from workloads.runs import hooks

    assert isinstance(hooks.for_context(CONTEXT), Rehearse)
    assert hooks.for_context("gke_p_us-west4_c") is None and hooks.for_context(None) is None


@pytest.mark.parametrize("path", ["workloads/runs/service.py", "workloads/runs/hooks.py", "workloads/runs/__init__.py", "workloads/cli/runs.py"])
def test_the_service_and_the_submit_command_do_not_import_the_local_cluster(path: str) -> None:
    tree = ast.parse((REPO / path).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m == "workloads.local" or m.startswith("workloads.local.")]
    assert "workloads.local" not in (REPO / path).read_text()


# ------------------------------------------------------------ options declared once


def _click_command(name: str):
    import typer

    from workloads.cli import _register, app

    _register([name])
    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", ["render", "submit"])
def test_every_override_with_a_flag_is_an_option_with_its_help(command: str) -> None:
    options = {o: p for p in _click_command(command).params for o in [*p.opts, *p.secondary_opts]}
    flagged = [(f, flag_of(f)) for f in Overrides.__dataclass_fields__.values() if flag_of(f)]
    assert len(flagged) == 26 and "ttl_seconds" not in {f.name for f, _ in flagged}
    for _, flag in flagged:
        for decl in flag.decls.split("/"):
            assert options[decl].help == flag.help, decl


@dataclass(frozen=True)
class More(Overrides):
    """Overrides with two more fields: what adding a run option takes."""

    warmup: int | None = _flag(None, "--warmup", "warm-up steps", metavar="STEPS")
    tags: tuple[str, ...] = _flag((), "--tag", "a tag; repeatable")


def test_a_new_override_field_is_a_new_option_with_no_other_edit() -> None:
    from typer.testing import CliRunner

    from toolkit.clikit import make_app
    from workloads.cli.runs import flag_options

    seen: list[More] = []
    app = make_app("t", "options from a dataclass")

    @app.command()
    @flag_options(More)
    def cmd(options: More = More()) -> None:  # noqa: B008
        seen.append(options)

    r = CliRunner().invoke(app, ["cmd", "--warmup", "3", "--tag", "a", "--tag", "b", "--slices", "2", "--host-network"])
    assert r.exit_code == 0, r.output
    assert seen == [More(warmup=3, tags=("a", "b"), slices=2, host_network=True)]
    assert "--warmup STEPS" in CliRunner().invoke(app, ["cmd", "--help"]).output


def test_help_quotes_the_defaults_the_planner_applies() -> None:
    options = {o: p for p in _click_command("submit").params for o in p.opts}
    restarts, every, start = options["--max-restarts"].help, options["--checkpoint-every"].help, options["--profile-start"].help
    assert restarts.endswith(f"recreating: {defaults.by_capacity(defaults.DEFAULT_MAX_RESTARTS)}")
    assert f"default by capacity, in place: {defaults.by_capacity(defaults.DEFAULT_IN_PLACE_MAX_RESTARTS)};" in restarts
    assert f"(exit {', '.join(map(str, defaults.PROGRAM_ERROR_EXIT_CODES))}: fails at once)" in restarts
    assert every.endswith(f"default by capacity: {defaults.by_capacity(defaults.DEFAULT_CHECKPOINT_MINUTES)}")
    assert f"(default {defaults.DEFAULT_PROFILE_START}:" in start
    # by_capacity groups the modes that share a value, in the table's order.
    assert defaults.by_capacity({"spot": 3, "flex-start": 3, "on-demand": 1}) == "spot/flex-start 3, on-demand 1"
    assert defaults.by_capacity({"a": 15.0, "b": 0.5}) == "a 15, b 0.5"
    # The lists the help still spells out match the code's.
    assert all(p in options["--priority"].help for p in PRIORITY_CLASSES)
    assert all(r in options["--runtime"].help for r in RUNTIMES)


def test_help_does_not_load_the_run_model() -> None:
    """`--help` builds the options from Overrides without importing the planner or the run model."""
    code = textwrap.dedent("""
        import sys, workloads.cli as c
        c._register()
        print(sorted(m for m in sys.modules if m in ("workloads.planning.overrides", "workloads.planning.model", "workloads.planning.planner", "infra.spec")))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['workloads.planning.overrides']"  # the options, and none of what plans


# ------------------------------------------------------------ one load and one render per command


@dataclass
class Counted:
    """What one command did: ``counts`` of the spec's reads, builds of the runtime's objects, read-backs of the
    rendered YAML and submission digests; ``reads``, every file read through the YAML reader, by path."""

    counts: dict[str, int]
    reads: Counter[Path]

    def clear(self) -> None:
        self.counts.update(dict.fromkeys(self.counts, 0))
        self.reads.clear()


ONCE = {"spec read": 1, "objects built": 1, "YAML read back": 1, "digest": 1}


@pytest.fixture()
def counted(monkeypatch) -> Counted:
    """Counts while a command runs, each through the one function every caller goes through."""
    import toolkit.yamlfile as yamlfile
    from workloads.render import kustomize, submission

    seen = Counted(dict.fromkeys(ONCE, 0), Counter())
    spec = (EXAMPLES_DIR / "default.yaml").resolve()

    def counting(key: str, fn):
        def wrapped(*a, **k):
            seen.counts[key] += 1
            return fn(*a, **k)

        return wrapped

    read_bounded = yamlfile.read_bounded

    def reading(path, kind):
        seen.reads[Path(path).resolve()] += 1
        seen.counts["spec read"] += Path(path).resolve() == spec
        return read_bounded(path, kind)

    monkeypatch.setattr(yamlfile, "read_bounded", reading)
    for name, rt in list(kustomize.RUNTIMES.items()):
        monkeypatch.setitem(kustomize.RUNTIMES, name, dataclasses.replace(rt, objects=counting("objects built", rt.objects)))
    monkeypatch.setattr(kustomize, "build_overlay", counting("YAML read back", kustomize.build_overlay))
    monkeypatch.setattr(submission, "digest", counting("digest", submission.digest))
    return seen


def test_one_submit_reads_the_spec_once_and_renders_the_run_once(tmp_path: Path, counted: Counted) -> None:
    """Dry run and real submit alike: the spec read at the CLI's edge, the objects built, read back and hashed once, and
    what a real submit applies (and writes as the run's identity) is that one render: what the dry run printed."""
    from tests.support import cli

    args = ("submit", "maxtext-6b", "--slices", "2", "--name", "nb-run", "--spec", EXAMPLES_DIR / "default.yaml")
    dry = cli("workloads", *args, "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    assert counted.counts == ONCE
    counted.clear()
    applied: dict[str, dict] = {}
    with serve() as api:
        _kueue_routes(api, applied)
        real = cli("workloads", *args, "--kubeconfig", api.kubeconfig(tmp_path, namespace="research"), "--timeout", "30", "-o", "json")
    assert real.returncode == 0, real.stderr
    assert counted.counts == ONCE
    stored = applied["nb-run"]
    for server_field in ("uid", "resourceVersion"):  # what the fake API server adds
        del stored["metadata"][server_field]
    assert json.loads(dry.stdout) == [stored]


def test_render_reads_the_spec_once_and_renders_once(tmp_path: Path, counted: Counted) -> None:
    from tests.support import cli

    r = cli("workloads", "render", "maxtext-6b", "--name", "r1", "--out", tmp_path / "out", "--spec", EXAMPLES_DIR / "default.yaml", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert counted.counts == ONCE


def test_submit_through_a_fleet_reads_each_of_its_files_once(counted: Counted) -> None:
    from tests.support import cli

    fleet = EXAMPLES_DIR / "fleet" / "fleet.yaml"
    r = cli("workloads", "submit", "maxtext-6b", "--name", "f1", "--spec", fleet, "--dry-run", "-o", "json")
    assert r.returncode == 0, r.stderr
    files = {p.resolve() for p in fleet.parent.glob("*.yaml")}  # the fleet file and its workers' specs
    assert len(files) == 3 and {p: n for p, n in counted.reads.items() if p in files} == dict.fromkeys(files, 1)
    assert {**counted.counts, "spec read": 1} == ONCE
    assert json.loads(r.stdout)[0]["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_a_rendered_run_is_what_apply_applies_and_a_fleets_dispatch_is_stamped_again(plan) -> None:
    from workloads.render import submission
    from workloads.render.kustomize import build_overlay, run_objects

    rendered = runs.render(plan)
    assert list(rendered.objects) == build_overlay(dict(rendered.files), plan.name) == run_objects(plan)
    assert rendered.digest == submission.digest(list(rendered.objects)) and rendered.stamped
    cluster = Recording(context="gke_p_us-west4_c")
    assert list(runs.apply(cluster, plan, rendered).applied) == list(rendered.objects) == cluster.applied
    # Through a fleet's manager the run object changes (managedBy MultiKueue): what is applied carries its own digest.
    dispatched = runs.through_fleet(plan, rendered)
    assert not dispatched.stamped and dispatched.digest == rendered.digest
    (js,) = runs.apply(Recording(context="gke_p_us-west4_c"), plan, dispatched).applied
    assert js["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert js["metadata"]["annotations"][TGK_SUBMISSION_ANNOTATION] == submission.digest([js]) != rendered.digest
