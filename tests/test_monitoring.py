"""Someone told: the monitoring: section (thresholds that can fire, channels), the stack's alert policies, log-based
metrics and TPU dashboard, their filters held to a real MaxText log, and GKE's managed ML Diagnostics."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from infra import recovery
from infra.gke_features import ML_DIAGNOSTICS_LABEL, ML_DIAGNOSTICS_MIN_GKE_VERSION
from infra.spec import parse_spec
from modules import monitoring as mon
from tests.support import REPO, cli, example_doc
from toolkit.errors import SpecError

TINY_LOG = REPO / "tests" / "data" / "maxtext" / "tiny_cpu.log"  # recorded from real MaxText


def _doc(base: str = "default", **section: Any) -> dict[str, Any]:
    doc = example_doc(base)
    m = doc.setdefault("monitoring", {})
    for k, v in section.items():
        m[k] = v
    return doc


def _alerts(base: str = "default", **alerts: Any) -> dict[str, Any]:
    doc = example_doc(base)
    doc.setdefault("monitoring", {}).setdefault("alerts", {}).update(alerts)
    return doc


def _refusal(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    return e.value


# ------------------------------------------------------------------ thresholds that can fire


@pytest.mark.parametrize("n", [0, -1])
def test_restarts_per_hour_below_one_is_refused(n: int):
    e = _refusal(_alerts(restarts_per_hour=n))
    assert e.field == "monitoring.alerts.restarts_per_hour" and "first start" in e.problem


@pytest.mark.parametrize(("g", "words"), [(0, "could never fire"), (-0.2, "could never fire"), (1.5, "would always fire")])
def test_goodput_outside_zero_one_is_refused(g: float, words: str):
    e = _refusal(_alerts(goodput_below=g))
    assert e.field == "monitoring.alerts.goodput_below" and words in e.problem


def test_thresholds_past_their_ceilings_are_refused():
    from infra.spec.monitoring import MAX_NO_STEP_MINUTES, MAX_RESTARTS_PER_HOUR

    # The no-step query's lookback must be longer than the longest window, or the alert could never fire.
    assert MAX_NO_STEP_MINUTES < mon.STEPPED_LOOKBACK_MINUTES
    assert _refusal(_alerts(no_step_minutes=MAX_NO_STEP_MINUTES + 1)).field == "monitoring.alerts.no_step_minutes"
    assert _refusal(_alerts(restarts_per_hour=MAX_RESTARTS_PER_HOUR + 1)).field == "monitoring.alerts.restarts_per_hour"
    assert _refusal(_alerts(goodput_below=float("nan"))).field == "monitoring.alerts.goodput_below"


def test_goodput_of_one_and_one_restart_load():
    s = parse_spec(_alerts(goodput_below=1, restarts_per_hour=1))
    assert s.monitoring.alerts.goodput_below == 1


def test_a_no_step_window_shorter_than_a_restart_to_its_first_step_is_refused():
    floor = math.ceil((recovery.RESTORE["bucket"].seconds + recovery.COMPILE.seconds) / 60)
    e = _refusal(_alerts(no_step_minutes=floor - 1))
    assert e.field == "monitoring.alerts.no_step_minutes"
    assert f"{floor} min" in e.problem and f"at least {floor}" in e.fix
    assert parse_spec(_alerts(no_step_minutes=floor)).no_step_minutes == floor


def test_the_no_step_floor_follows_where_checkpoints_are_restored_from():
    """With multi-tier checkpointing on every pool, a restart restores from a peer's RAM disk: a minute, not thirty."""
    s = parse_spec(example_doc("v6e-reservation"))
    (floor, why), (default, _) = s.no_step_needs()
    assert floor == recovery.RESTORE["peer-ramdisk"].seconds + recovery.COMPILE.seconds and "peer-ramdisk" in why
    assert s.no_step_minutes == math.ceil(default / 60) and default > floor


def test_the_derived_window_covers_the_slowest_recovery_of_the_pools():
    s = parse_spec(example_doc("default"))
    (_, _), (back, _) = s.wait_for_pods_ready_needs()
    assert s.no_step_minutes * 60 >= back + recovery.RESTORE["bucket"].seconds + recovery.COMPILE.seconds


@pytest.mark.parametrize(
    ("channel", "field", "words"),
    [
        ({"type": "email", "address": "not-an-address"}, "monitoring.notification_channels[0].address", "oncall@example.com"),
        ({"type": "pubsub", "address": "tpu-alerts"}, "monitoring.notification_channels[0].address", "projects/my-project/topics/"),
        ({"type": "webhook", "address": "http://plain.example.com/x"}, "monitoring.notification_channels[0].address", "https://"),
        ({"type": "sms", "address": "+1555"}, "monitoring.notification_channels[0].type", "email"),
    ],
)
def test_a_channel_address_of_the_wrong_kind_is_refused(channel: dict[str, str], field: str, words: str):
    e = _refusal(_doc(notification_channels=[channel]))
    assert e.field == field and words in e.fix, str(e)


def test_a_channel_listed_twice_is_refused():
    c = {"type": "email", "address": "a@example.com"}
    e = _refusal(_doc(notification_channels=[c, dict(c)]))
    assert e.field == "monitoring.notification_channels[1].address"


def test_synth_refuses_a_threshold_in_one_line_and_writes_nothing(tmp_path: Path):
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_alerts(goodput_below=2)))
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", spec, "--out", out)
    assert proc.returncode == 2 and proc.stderr.startswith("error: monitoring.alerts.goodput_below: ") and len(proc.stderr.splitlines()) == 1
    assert not out.exists()


# ------------------------------------------------------------------ the filters, on a real MaxText log


def test_the_step_metric_reads_every_step_line_of_real_maxtext_and_its_seconds():
    lines = TINY_LOG.read_text().splitlines()
    steps = [ln for ln in lines if mon.STEP_LINE in ln]
    assert len(steps) >= 5
    # Cloud Logging's REGEXP_EXTRACT (RE2) with the pattern the metric declares; Python's re reads it the same.
    pattern = re.search(r'REGEXP_EXTRACT\(textPayload, "(.+)"\)', _steps_metric()["value_extractor"]).group(1).replace("\\\\", "\\")
    from workloads.observe.goodput import _STEP

    for ln in steps:
        got = float(re.search(pattern, ln).group(1))
        assert got == float(_STEP.search(ln).group(2))


def test_the_attempt_metric_matches_one_line_per_start_of_real_maxtext():
    lines = TINY_LOG.read_text().splitlines()
    starts = [ln for ln in lines if any(a in ln for a in mon.ATTEMPT_LINES)]
    assert len(starts) == 1  # one start of the program in this log: one attempt


# Pod names as the Job controller makes them: <job>-<completion index>-<5 chars>; a JobSet's Jobs are <jobset>-slice-<i>.
PODS = {
    "maxtext-6b-slice-0-0-x7k2q": ("maxtext-6b", True),
    "maxtext-6b-slice-0-3-x7k2q": ("maxtext-6b", False),
    "maxtext-6b-slice-1-0-x7k2q": ("maxtext-6b", False),
    "llama3-8b-x2-slice-1-12-ab3cd": ("llama3-8b-x2", False),
    "golden-0-ab3cd": ("golden", True),  # the Job runtime: the run's one Job
    "golden-3-ab3cd": ("golden", False),
    "run2-0-ab3cd": ("run2", True),
}


def _first_worker(pod: str) -> bool:
    """The attempts metric's pod filter, read as Cloud Logging reads it (RE2 regexes; Python's re agrees on these)."""
    text = mon.Monitoring._first_worker()
    want = re.fullmatch(r'\(resource\.labels\.pod_name=~"(.+)" OR \(resource\.labels\.pod_name!~"(.+)" AND resource\.labels\.pod_name=~"(.+)"\)\)', text)
    first, any_jobset, job_first = want.groups()
    return bool(re.search(first, pod)) or (not re.search(any_jobset, pod) and bool(re.search(job_first, pod)))


@pytest.mark.parametrize("pod", sorted(PODS))
def test_the_run_label_and_the_first_worker_of_jobset_and_job_pods(pod: str):
    from workloads.planning.target import REPLICATED_JOB

    assert mon.REPLICATED_JOB == REPLICATED_JOB
    run, first = PODS[pod]
    pattern = re.search(r'REGEXP_EXTRACT\(resource\.labels\.pod_name, "(.+)"\)', mon.Monitoring._run_extractor()).group(1)
    assert re.match(pattern, pod).group(1) == run
    assert _first_worker(pod) is first


# ------------------------------------------------------------------ the stack


def _synth(doc: dict[str, Any], out: Path) -> dict[str, Any]:
    from infra.stack import synth

    return json.loads(synth(parse_spec(copy.deepcopy(doc)), out).read_text())


_DOCS: dict[str, dict[str, Any]] = {}


def _steps_metric() -> dict[str, Any]:
    if "default" not in _DOCS:
        import tempfile

        _DOCS["default"] = _synth(example_doc("default"), Path(tempfile.mkdtemp()))
    return next(m for m in _DOCS["default"]["resource"]["google_logging_metric"].values() if m["name"].endswith("_steps"))


@pytest.mark.synth
def test_the_default_stack_declares_four_policies_two_metrics_and_the_dashboard(tmp_path: Path):
    doc = _synth(example_doc("default"), tmp_path)
    r = doc["resource"]
    metrics = {m["name"]: m for m in r["google_logging_metric"].values()}
    assert set(metrics) == {"tgk_tpu_dev_steps", "tgk_tpu_dev_attempts"}
    for m in metrics.values():
        assert 'resource.labels.cluster_name="tpu-dev"' in m["filter"] and 'container_name="workload"' in m["filter"]
    policies = {p["display_name"]: p for p in r["google_monitoring_alert_policy"].values()}
    assert len(policies) == 4
    queries = {name: p["conditions"][0].get("condition_prometheus_query_language", {}).get("query", "") for name, p in policies.items()}
    spec = parse_spec(example_doc("default"))
    restarts = next(q for n, q in queries.items() if "restarts more than 3" in n)
    assert restarts.endswith("> 3") and "user_tgk_tpu_dev_attempts" in restarts
    no_step = next(q for n, q in queries.items() if "no training step" in n)
    assert f"> {spec.no_step_minutes * 60})" in no_step and f"[{spec.no_step_minutes}m]" in no_step
    goodput = next(q for n, q in queries.items() if "goodput" in n)
    assert "compute_googleapis_com:workload_goodput_time" in goodput and goodput.endswith("< 0.5")
    node_pool = next(p for n, p in policies.items() if "node pool" in n)
    assert 'resource.type="gke_nodepool"' in node_pool["conditions"][0]["condition_matched_log"]["filter"]
    assert all("notification_channels" not in p for p in policies.values())  # none in the spec: console only
    (dash,) = r["google_monitoring_dashboard"].values()
    tiles = json.loads(dash["dashboard_json"])["gridLayout"]["widgets"]
    filters = " ".join(t["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"]["filter"] for t in tiles)
    for metric in (
        "kubernetes.io/container/accelerator/duty_cycle",
        "kubernetes.io/container/accelerator/memory_used",
        "logging.googleapis.com/user/tgk_tpu_dev_attempts",
        "logging.googleapis.com/user/tgk_tpu_dev_steps",
    ):
        assert f'metric.type="{metric}"' in filters


@pytest.mark.synth
def test_every_policy_notifies_every_channel_of_the_spec(tmp_path: Path):
    doc = _doc(
        "teams",
        notification_channels=[
            {"type": "email", "address": "oncall@example.com"},
            {"type": "pubsub", "address": "projects/my-tpu-project/topics/tpu-alerts"},
            {"type": "webhook", "address": "https://hooks.example.com/tpu"},
        ],
    )
    r = _synth(doc, tmp_path)["resource"]
    channels = list(r["google_monitoring_notification_channel"].values())
    assert [(c["type"], c["labels"]) for c in channels] == [
        ("email", {"email_address": "oncall@example.com"}),
        ("pubsub", {"topic": "projects/my-tpu-project/topics/tpu-alerts"}),
        ("webhook_tokenauth", {"url": "https://hooks.example.com/tpu"}),
    ]
    ids = [f"${{google_monitoring_notification_channel.{k}.id}}" for k in r["google_monitoring_notification_channel"]]
    for p in r["google_monitoring_alert_policy"].values():
        assert p["notification_channels"] == ids


@pytest.mark.synth
def test_alerts_and_dashboard_can_be_left_out(tmp_path: Path):
    r = _synth(_doc(alerts={"enabled": False}, dashboard=False), tmp_path)["resource"]
    assert "google_monitoring_alert_policy" not in r and "google_monitoring_dashboard" not in r
    assert len(r["google_logging_metric"]) == 2  # the metrics stay: the step time is read from them


@pytest.mark.synth
def test_a_fleets_manager_runs_nothing_and_declares_no_alerts(tmp_path: Path):
    from infra.fleet import load_spec_or_fleet
    from infra.synth_out import synth_into

    paths = synth_into(load_spec_or_fleet(REPO / "examples/fleet/fleet.yaml", want="fleet"), tmp_path)
    manager = json.loads(paths[-1].read_text())["resource"]
    workers = [json.loads(p.read_text())["resource"] for p in paths[:-1]]
    assert "google_monitoring_alert_policy" not in manager and "google_logging_metric" not in manager
    assert all(len(w["google_monitoring_alert_policy"]) == 4 for w in workers)


# ------------------------------------------------------------------ managed ML Diagnostics


def test_ml_diagnostics_is_on_where_the_floor_has_it_and_off_below():
    assert parse_spec(example_doc("default")).ml_diagnostics is False
    doc = example_doc("default")
    doc["cluster"]["min_version"] = ML_DIAGNOSTICS_MIN_GKE_VERSION
    assert parse_spec(doc).ml_diagnostics is True
    assert parse_spec(_doc(ml_diagnostics="off") | {"cluster": doc["cluster"]}).ml_diagnostics is False


def test_asking_for_ml_diagnostics_raises_the_floor_and_an_older_min_version_is_refused():
    s = parse_spec(_doc(ml_diagnostics="on"))
    assert s.ml_diagnostics and s.min_master_version == ML_DIAGNOSTICS_MIN_GKE_VERSION
    doc = _doc(ml_diagnostics="on")
    doc["cluster"]["min_version"] = "1.33.0-gke.1712000"
    e = _refusal(doc)
    assert e.field == "cluster.min_version" and "monitoring.ml_diagnostics" in e.problem


def test_deploy_turns_ml_diagnostics_on_after_the_apply_and_labels_the_team_namespaces(tmp_path: Path):
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_doc(ml_diagnostics="on")))
    proc = cli("infra", "deploy", "--spec", spec, "--dry-run", "--no-checks", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "gcloud container clusters update tpu-dev --region=us-west4 --project=my-tpu-project --enable-managed-mldiagnostics"
    assert "apply" in lines[-2]
    from workloads.render.kueue import namespaces

    assert all(ns["metadata"]["labels"][ML_DIAGNOSTICS_LABEL] == "true" for ns in namespaces(parse_spec(_doc(ml_diagnostics="on"))))
    assert all(ML_DIAGNOSTICS_LABEL not in ns["metadata"]["labels"] for ns in namespaces(parse_spec(example_doc("default"))))
    off = cli("infra", "deploy", "--spec", "examples/default.yaml", "--dry-run", "--no-checks", "--out", tmp_path / "out2")
    assert "mldiagnostics" not in off.stdout
