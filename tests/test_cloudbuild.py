"""Cloud Build configs (cloudbuild/*.yaml) and the state-bucket bootstrap they start with.

Static checks: the Cloud Build schema basics, substitutions, pinned builder images, repo
files and CLI commands that steps reference. Behavioural checks: steps are run locally
(shell shims stand in for pip, kubectl, docker, terraform and the toolchain images) to show
that the JobSet/Kueue versions the provision pipeline installs are the spec's, that the
image pipeline pushes the tag the recipes pull, and that the CI test step runs .ci/run with
Go and Node 22 on PATH. The bootstrap script runs against a real GCS-compatible emulator
(gcp-storage-emulator, tests/support/gcs_emulator.py) on loopback.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest
import yaml

from tests.support import EXAMPLES, REPO, cli
from tests.support.gcs_emulator import running_emulator

CB = REPO / "cloudbuild"
CONFIGS = sorted(CB.glob("*.yaml"))
NAMES = [c.stem for c in CONFIGS]

BUILTINS = {
    "PROJECT_ID",
    "PROJECT_NUMBER",
    "BUILD_ID",
    "LOCATION",
    "TRIGGER_NAME",
    "COMMIT_SHA",
    "REVISION_ID",
    "SHORT_SHA",
    "REPO_NAME",
    "REPO_FULL_NAME",
    "BRANCH_NAME",
    "TAG_NAME",
    "REF_NAME",
    "TRIGGER_BUILD_CONFIG_PATH",
    "SERVICE_ACCOUNT_EMAIL",
    "SERVICE_ACCOUNT",
}
DURATION = re.compile(r"^\d+(\.\d{1,9})?s$")
VAR = re.compile(r"\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path.name} is not a mapping"
    return doc


def step_text(step: dict) -> str:
    parts = [step.get("name", ""), step.get("entrypoint", ""), step.get("dir", "")]
    parts += [str(a) for a in step.get("args", [])] + [str(e) for e in step.get("env", [])]
    return "\n".join(parts)


def all_text(doc: dict) -> str:
    texts = [step_text(s) for s in doc["steps"]]
    texts += [str(i) for i in doc.get("images", [])]
    texts += [str(e) for e in (doc.get("options") or {}).get("env", [])]
    return "\n".join(texts)


def used_variables(text: str) -> set[str]:
    out = set()
    for m in VAR.finditer(text):
        if m.group(1) == "$":
            continue  # $$ is an escaped $ for the step's shell
        out.add(m.group(2) or m.group(3))
    return out


def render(text: str, subs: dict[str, str]) -> str:
    """Cloud Build's substitution: $$ -> $, $_X / ${_X} / builtins -> value."""

    def one(m: re.Match) -> str:
        if m.group(1) == "$":
            return "$"
        name = m.group(2) or m.group(3)
        return subs.get(name, f"dummy-{name.lower()}")

    return VAR.sub(one, text)


def step_script(step: dict) -> tuple[str, str]:
    """(shell, script) of a step whose entrypoint is a shell run with -c."""
    args = [str(a) for a in step.get("args", [])]
    assert step.get("entrypoint") in ("bash", "sh") and args[:1] == ["-c"], step.get("id")
    return step["entrypoint"], args[1]


def ancestors(steps: list[dict]) -> dict[str, set[str]]:
    """Cloud Build ordering: no waitFor = after every earlier step; ['-'] = at start."""
    out: dict[str, set[str]] = {}
    ids = [s.get("id") for s in steps]
    for i, s in enumerate(steps):
        wf = s.get("waitFor")
        direct = set(ids[:i]) if wf is None else {w for w in wf if w != "-"}
        out[s["id"]] = set(direct).union(*(out[d] for d in direct)) if direct else set()
    return out


# ------------------------------------------------------------------ schema basics


def test_the_four_pipelines_exist():
    assert {"provision", "destroy", "ci", "image-maxtext"} <= set(NAMES)


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_schema_basics(path: Path):
    doc = load(path)
    allowed = {"steps", "timeout", "substitutions", "options", "images", "artifacts", "tags", "availableSecrets", "serviceAccount", "logsBucket", "queueTtl"}
    assert set(doc) <= allowed, set(doc) - allowed
    steps = doc["steps"]
    assert isinstance(steps, list) and steps
    ids = []
    for s in steps:
        assert isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"], s
        assert set(s) <= {
            "name",
            "args",
            "env",
            "dir",
            "id",
            "waitFor",
            "entrypoint",
            "secretEnv",
            "volumes",
            "timeout",
            "script",
            "allowFailure",
            "allowExitCodes",
        }, s.keys()
        assert "id" in s, f"every step has an id: {s['name']}"
        ids.append(s["id"])
        assert all(isinstance(a, str) for a in s.get("args", [])), f"{s['id']}: args must be strings"
        for e in s.get("env", []):
            assert re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", e), e
    assert len(ids) == len(set(ids)), f"duplicate step ids: {ids}"
    for s in steps:
        for w in s.get("waitFor", []):
            assert w == "-" or w in ids[: ids.index(s["id"])], f"{s['id']} waits for unknown/later step {w!r}"
    for t in [doc.get("timeout")] + [s.get("timeout") for s in steps] + [doc.get("queueTtl")]:
        if t is not None:
            assert DURATION.match(str(t)), f"bad duration {t!r}"


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_substitutions_declared(path: Path):
    doc = load(path)
    declared = doc.get("substitutions") or {}
    for k in declared:
        assert re.match(r"^_[A-Z0-9_]+$", k), f"user substitutions start with _ and are upper case: {k}"
    used = used_variables(all_text(doc))
    for v in used:
        if v.startswith("_"):
            assert v in declared, f"{path.name}: ${v} is used but not declared"
        else:
            assert v in BUILTINS, f"{path.name}: ${v} is neither a builtin nor a _SUBSTITUTION (escape shell variables as $$)"
    unused = set(declared) - used
    assert not unused, f"{path.name}: declared but unused substitutions {unused}"


def _pinned(image: str) -> bool:
    name, _, digest = image.partition("@sha256:")
    if digest:
        return True
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.split(":", 1)[1]
    return tag != "latest" and bool(re.search(r"\d", tag)) and not tag.startswith("$")


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_builder_images_pinned(path: Path):
    for s in load(path)["steps"]:
        assert _pinned(s["name"]), f"{path.name}:{s['id']}: builder image {s['name']!r} is not pinned to a version"


def test_pin_check_rejects_unpinned():
    assert not _pinned("python") and not _pinned("python:latest") and not _pinned("gcr.io/x/y")
    assert not _pinned("localhost:5000/img") and _pinned("hashicorp/terraform:1.11.4")


def test_dockerfile_pinned_and_installs_maxtext():
    text = (CB / "maxtext" / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and all(_pinned(f) for f in froms), froms
    assert any(f.startswith("python:3.12") for f in froms)
    default = re.search(r"^ARG MAXTEXT_VERSION=(\S+)", text, re.M).group(1)
    from workloads.maxtext import env as maxtext_env
    from workloads.planning import images

    # One MaxText version: the image's, the recipes' and the local venv's (validation, AOT).
    assert default == images.MAXTEXT_VERSION == maxtext_env.MAXTEXT_VERSION
    assert images.MAXTEXT_IMAGE == f"maxtext:{images.MAXTEXT_VERSION}"
    assert '"maxtext[tpu]==${MAXTEXT_VERSION}"' in text
    # The pipeline types neither the tag nor the version: both come from the toolkit.
    body = (CB / "image-maxtext.yaml").read_text()
    assert images.MAXTEXT_VERSION not in body and "_TAG" not in body


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_shell_scripts_parse(path: Path, tmp_path: Path):
    doc = load(path)
    for s in doc["steps"]:
        if s.get("entrypoint") not in ("bash", "sh") or s.get("args", [None])[0] != "-c":
            continue
        shell, script = step_script(s)
        proc = subprocess.run([shell, "-n", "-c", render(script, doc.get("substitutions") or {})], capture_output=True, text=True)
        assert proc.returncode == 0, f"{path.name}:{s['id']}: {proc.stderr}"


# ------------------------------------------------------------------ repo references

REF = re.compile(r"(?<![\w/.-])((?:scripts|cloudbuild|examples|tests|infra|workloads)/[\w./-]*\w|constraints\.txt|pyproject\.toml)")


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
def test_referenced_repo_files_exist(path: Path):
    text = all_text(load(path))
    refs = set(REF.findall(text))
    assert refs, "expected at least one repo file reference"
    missing = [r for r in refs if not (REPO / r).exists()]
    assert not missing, f"{path.name} references missing files: {missing}"
    for r in refs:
        if r.startswith("scripts/") and r.endswith(".sh"):
            assert os.access(REPO / r, os.X_OK) or "bash" in text


def test_reference_check_can_fail():
    assert REF.findall("bash scripts/nope.sh --spec x") == ["scripts/nope.sh"]
    assert not (REPO / "scripts/nope.sh").exists()


def _cli_calls(module: str) -> set[tuple[str, ...]]:
    calls = set()
    pat = re.compile(rf"python\S*\s+-m\s+{module}\s+((?:[a-z][-a-z]*\s*)+)")
    for path in CONFIGS:
        for m in pat.finditer(all_text(load(path))):
            words = m.group(1).split()
            calls.add(tuple(words[:2]))
    return calls


def _help_commands(module: str, *sub: str) -> set[str] | None:
    proc = cli(module, *sub, "--help")
    if proc.returncode != 0:
        return None
    cmds, in_box = set(), False
    for line in proc.stdout.splitlines():
        if "Commands" in line:
            in_box = True
            continue
        if in_box:
            # "│ name   help" (rich) or "  name   help" (plain); wrapped help text never has 2 spaces after a word
            m = re.match(r"^[│|]?\s{1,2}([a-z][-a-z]*)\s{2,}\S", line)
            if m:
                cmds.add(m.group(1))
    return cmds


def test_infra_commands_exist():
    calls = _cli_calls("infra")
    assert ("synth",) in {c[:1] for c in calls}
    cmds = _help_commands("infra")
    assert cmds and "synth" in cmds, f"python -m infra --help must list its commands: {cli('infra', '--help').stdout}"
    for c in calls:
        assert c[0] in cmds, f"python -m infra {c[0]} is not a command (have {sorted(cmds)})"


def test_workloads_commands_exist():
    calls = _cli_calls("workloads")
    assert ("queues", "apply") in calls
    top = _help_commands("workloads")
    assert top, f"python -m workloads --help must list its commands: {cli('workloads', '--help')}"
    for c in calls:
        assert c[0] in top, f"python -m workloads {c[0]} is not a command (have {sorted(top)})"
        if len(c) > 1:
            sub = _help_commands("workloads", c[0])
            assert sub and c[1] in sub, f"python -m workloads {' '.join(c)} is not a command"


# ------------------------------------------------------------------ pipeline shape


def test_provision_order():
    steps = load(CB / "provision.yaml")["steps"]
    anc = ancestors(steps)
    order = [
        "state-bucket",
        "tf-init",
        "tf-plan",
        "tf-apply",
        "credentials",
        "install-jobset-kueue",
        "kueue-config-read",
        "kueue-config-merge",
        "kueue-config-apply",
        "kueue-objects",
    ]
    for before, after in zip(order, order[1:], strict=False):
        assert before in anc[after], f"{after} must run after {before}"
    assert "synth" in anc["tf-init"] and "spec-env" in anc["state-bucket"]
    by_id = {s["id"]: step_text(s) for s in steps}
    assert "bootstrap-state-bucket.sh" in by_id["state-bucket"]
    assert re.search(r"plan .*-out=tfplan", by_id["tf-plan"]) and re.search(r"apply .*tfplan", by_id["tf-apply"])
    assert "-auto-approve" not in by_id["tf-apply"], "apply the reviewed plan file, not a fresh plan"
    assert "get-credentials" in by_id["credentials"]
    assert "--server-side" in by_id["install-jobset-kueue"]


def test_destroy_and_ci_shape():
    d = {s["id"]: step_text(s) for s in load(CB / "destroy.yaml")["steps"]}
    assert "destroy -auto-approve" in d["tf-destroy"] and "TGK_DELETION_PROTECTION" in d["tf-destroy"]
    assert "deletion_protection" in (CB / "destroy.yaml").read_text().split("steps:")[0]
    ci = load(CB / "ci.yaml")["steps"]
    anc = ancestors(ci)
    text = {s["id"]: step_text(s) for s in ci}
    assert "./.ci/run" in text["test"] and os.access(REPO / ".ci/run", os.X_OK)
    assert "./scripts/test" in (REPO / ".ci/run").read_text()
    assert "examples/*.yaml" in text["synth-examples"]
    assert "test" in anc["tf-plan"] and "synth" in anc["tf-plan"]
    assert {"go", "node"} <= anc["test"] and "node" in anc["synth"] and "node" in anc["synth-examples"]
    assert re.search(r"terraform .* plan", text["tf-plan"])


def test_no_hard_coded_versions_or_places():
    for path in CONFIGS:
        body = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
        assert not re.search(r"download/v\d", body), f"{path.name}: add-on version hard-coded"
        assert "my-tpu-project" not in body and "us-west4" not in body, f"{path.name}: spec values hard-coded"


# ------------------------------------------------------------------ behaviour: versions come from the spec


def _shim(dir_: Path, name: str, body: str) -> None:
    p = dir_ / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _run_step(doc: dict, step_id: str, workspace: Path, subs: dict[str, str], shims: Path) -> subprocess.CompletedProcess[str]:
    step = next(s for s in doc["steps"] if s["id"] == step_id)
    shell, script = step_script(step)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"}
    for e in list((doc.get("options") or {}).get("env", [])) + list(step.get("env", [])):
        k, _, v = render(e, subs).partition("=")
        env[k] = v.replace("/workspace", str(workspace))
    return subprocess.run([shell, "-c", render(script, subs)], cwd=workspace, env=env, text=True, capture_output=True, timeout=120)


@pytest.fixture
def shims(tmp_path: Path) -> Path:
    d = tmp_path / "shims"
    d.mkdir()
    real = sys.executable
    # `python -m venv X` makes X/bin/python call this interpreter (the toolkit is installed in it)
    # and X/bin/pip a no-op; anything else goes to the real interpreter.
    _shim(
        d,
        "python",
        f"""if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\nexec {real} "$@"\\n' > "$3/bin/python"
  printf '#!/bin/sh\\necho "pip $*" >> "$TGK_TEST_LOG"\\n' > "$3/bin/pip"
  chmod +x "$3/bin/python" "$3/bin/pip"
  exit 0
fi
exec {real} "$@"
""",
    )
    _shim(d, "kubectl", 'echo "kubectl $*" >> "$TGK_TEST_LOG"\n')
    return d


@pytest.mark.parametrize("versions", [None, {"kueue": "v0.14.9", "jobset": "v0.8.3"}])
def test_provision_installs_the_spec_versions(versions, tmp_path: Path, shims: Path, monkeypatch):
    from infra.spec import load_spec

    spec_file = tmp_path / "env.yaml"
    data = yaml.safe_load((REPO / "examples/default.yaml").read_text())
    if versions:
        data["versions"] = versions
    spec_file.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_file)
    ws = tmp_path / "workspace"
    ws.mkdir()
    log = tmp_path / "calls.log"
    monkeypatch.setenv("TGK_TEST_LOG", str(log))
    doc = load(CB / "provision.yaml")
    subs = {**doc["substitutions"], "_SPEC": str(spec_file)}

    r = _run_step(doc, "spec-env", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    assert "pip install -q --disable-pip-version-check -c constraints.txt -e ." in log.read_text()
    r = _run_step(doc, "install-jobset-kueue", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    calls = [ln for ln in log.read_text().splitlines() if ln.startswith("kubectl")]
    js, kq = spec.versions.jobset, spec.versions.kueue
    if versions:
        assert (js, kq) == ("v0.8.3", "v0.14.9")
    ctx = f"--context gke_{spec.project}_{spec.region}_{spec.cluster.name}"
    assert calls[0] == f"kubectl {ctx} apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/{js}/manifests.yaml"
    assert calls[1] == f"kubectl {ctx} apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/{kq}/manifests.yaml"
    assert calls[2].startswith(f"kubectl {ctx} -n jobset-system wait --for=condition=Available deployment --all")
    assert calls[3].startswith(f"kubectl {ctx} -n kueue-system wait --for=condition=Available deployment --all")

    env = (ws / ".tgk" / "env.sh").read_text()
    assert f"export TGK_CLUSTER={spec.cluster.name}" in env and f"export TGK_REGION={spec.region}" in env


def test_provision_turns_on_wait_for_pods_ready(tmp_path: Path, shims: Path, monkeypatch):
    """The release's Kueue configuration, read from the cluster, comes back with the spec's waitForPodsReady."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("TGK_TEST_LOG", str(log))
    release_config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n"
        "integrations:\n  frameworks: [batch/job, jobset.x-k8s.io/jobset]\n"
    )
    _shim(shims, "kubectl", f'echo "kubectl $*" >> "$TGK_TEST_LOG"\ncase "$*" in *"get configmap"*) printf \'%s\' "{release_config}";; esac\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "provision.yaml")
    subs = {**doc["substitutions"], "_SPEC": str(EXAMPLES / "default.yaml")}
    for step in ("spec-env", "kueue-config-read", "kueue-config-merge", "kueue-config-apply"):
        r = _run_step(doc, step, ws, subs, shims)
        assert r.returncode == 0, f"{step}: {r.stderr}"
    merged = yaml.safe_load((ws / ".tgk" / "kueue-config.01.merged.yaml").read_text())
    assert merged["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]  # the release's own settings kept
    w = merged["waitForPodsReady"]
    from infra.spec import load_spec

    timeout, recovery_timeout = load_spec(EXAMPLES / "default.yaml").wait_for_pods_ready  # derived from the pools (infra/recovery.py)
    assert w["timeout"] == f"{timeout}s" and w["recoveryTimeout"] == f"{recovery_timeout}s" and w["requeuingStrategy"]["timestamp"] == "Eviction"
    calls = log.read_text()
    assert "controller_manager_config\\.yaml" in calls or "controller_manager_config\\\\.yaml" in calls
    assert "rollout restart deployment/kueue-controller-manager" in calls
    assert "--from-file=controller_manager_config.yaml=.tgk/kueue-config.01.merged.yaml" in calls


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "recreate"])
def test_provision_turns_on_jobsets_in_place_gate_only_where_runs_restart_in_place(tmp_path: Path, shims: Path, monkeypatch, in_place):
    """JobSet's release configuration, read from the cluster, comes back with its InPlaceRestart gate and the
    controller is restarted to read it; a spec without in-place restarts leaves JobSet's configuration alone."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("TGK_TEST_LOG", str(log))
    # JobSet v0.12.0's config/components/manager/controller_manager_config.yaml
    release_config = (
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\nleaderElection:\n  leaderElect: true\ninternalCertManagement:\n  enable: true\n"
    )
    _shim(shims, "kubectl", f'echo "kubectl $*" >> "$TGK_TEST_LOG"\ncase "$*" in *"get configmap"*) printf \'%s\' "{release_config}";; esac\n')
    spec_doc = yaml.safe_load((EXAMPLES / "default.yaml").read_text())
    if in_place:
        spec_doc["recovery"] = {"restart": "in-place"}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec_doc))
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "provision.yaml")
    subs = {**doc["substitutions"], "_SPEC": str(spec_file)}
    for step in ("spec-env", "jobset-config", "jobset-config-merge", "jobset-config-apply"):
        r = _run_step(doc, step, ws, subs, shims)
        assert r.returncode == 0, f"{step}: {r.stderr}"
    merged = yaml.safe_load((ws / ".tgk" / "jobset-config.01.merged.yaml").read_text())
    assert merged["leaderElection"] == {"leaderElect": True} and merged["internalCertManagement"] == {"enable": True}  # the release's kept
    calls = log.read_text()
    if in_place:
        assert merged["featureGates"] == {"InPlaceRestart": True}
        assert "--from-file=controller_manager_config.yaml=.tgk/jobset-config.01.merged.yaml" in calls
        assert "rollout restart deployment/jobset-controller-manager" in calls
    else:
        assert "featureGates" not in merged
        assert "jobset-manager-config --from-file" not in calls and "rollout restart" not in calls
        assert "its release configuration stays" in r.stdout


def test_provision_leaves_multi_tier_checkpointing_to_the_stack():
    """The add-on is the stack's (addons_config.high_scale_checkpointing_config): no gcloud step turns it on behind Terraform's back."""
    doc = load(CB / "provision.yaml")
    assert not any("HighScaleCheckpointing" in json.dumps(step) for step in doc["steps"])


def test_spec_env_refuses_a_bad_spec(tmp_path: Path, shims: Path, monkeypatch):
    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "provision.yaml")
    bad = REPO / "tests/bad_specs/zero_slices.yaml"
    r = _run_step(doc, "spec-env", ws, {**doc["substitutions"], "_SPEC": str(bad)}, shims)
    assert r.returncode != 0
    assert "error: tpu_pools[0].slices:" in r.stderr


def test_destroy_stops_on_deletion_protection(tmp_path: Path, shims: Path, monkeypatch):
    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "destroy.yaml")
    _shim(shims, "terraform", 'echo "terraform $*" >> "$TGK_TEST_LOG"\n')
    (ws / ".tgk").mkdir()
    (ws / ".tgk" / "stack_dirs").write_text("cdktn.out/stacks/x\n")
    unprotected = tmp_path / "unprotected.yaml"  # deletion protection is on by default: the opt-out is explicit
    unprotected.write_text(
        (EXAMPLES / "default.yaml").read_text().replace("  release_channel: RAPID\n", "  release_channel: RAPID\n  deletion_protection: false\n")
    )
    for spec_path, protected in ((EXAMPLES / "tpu7x.yaml", True), (EXAMPLES / "default.yaml", True), (unprotected, False)):
        subs = {**doc["substitutions"], "_SPEC": str(spec_path)}
        assert _run_step(doc, "spec-env", ws, subs, shims).returncode == 0
        r = _run_step(doc, "tf-destroy", ws, subs, shims)
        log = (tmp_path / "log").read_text()
        if protected:
            assert r.returncode == 2 and "cluster.deletion_protection" in r.stderr and "terraform" not in log
        else:
            assert r.returncode == 0, r.stderr
            assert "terraform -chdir=cdktn.out/stacks/x destroy -auto-approve" in log


def test_credentials_go_through_the_dns_endpoint_by_default(tmp_path: Path, shims: Path, monkeypatch):
    """The IP endpoint admits no outside address by default, so Cloud Build's workers reach the cluster by its DNS endpoint."""
    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "provision.yaml")
    _shim(shims, "gcloud", 'echo "gcloud $*" >> "$TGK_TEST_LOG"\n')
    _shim(shims, "kubectl", 'echo "kubectl $*" >> "$TGK_TEST_LOG"\n')
    ip_only = tmp_path / "ip-only.yaml"
    ip_only.write_text((REPO / "examples/default.yaml").read_text().replace("  release_channel: RAPID\n", "  release_channel: RAPID\n  dns_endpoint: false\n"))
    for spec_path, dns in ((REPO / "examples/default.yaml", True), (ip_only, False)):
        (tmp_path / "log").write_text("")
        subs = {**doc["substitutions"], "_SPEC": str(spec_path)}
        assert _run_step(doc, "spec-env", ws, subs, shims).returncode == 0
        r = _run_step(doc, "credentials", ws, subs, shims)
        assert r.returncode == 0, r.stderr
        (line,) = [ln for ln in (tmp_path / "log").read_text().splitlines() if "get-credentials" in ln]
        assert line.endswith("--project my-tpu-project --dns-endpoint") if dns else line.endswith("--project my-tpu-project"), line


# What the Ray image's build step copies out of the workspace (a Cloud Build workspace is the repository),
# and the agent image's build context.
_RAY_CONTEXT_FILES = (
    "cloudbuild/ray/Dockerfile",
    "scripts/ray.constraints.txt",
    "workloads/__init__.py",
    "workloads/ray",
    "cloudbuild/jobset-agent/Dockerfile",
)


def _run_image_pipeline(spec: Path, tmp_path: Path, shims: Path, monkeypatch) -> tuple[str, list[str], Path]:
    """Run the image pipeline with a stand-in docker: (the docker calls, the images pushed in order, the workspace)."""
    import shutil

    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    _shim(shims, "docker", 'echo "docker $*" >> "$TGK_TEST_LOG"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    # The workspace is the repository: its packages whole (a partial copy would shadow the
    # toolkit the steps' Python imports), and the files the Ray build context is made of.
    for rel in ("infra", "modules", "toolkit", "workloads", *_RAY_CONTEXT_FILES):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, ws / rel, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / rel, ws / rel)
    doc = load(CB / "image-maxtext.yaml")
    subs = {**doc["substitutions"], "_SPEC": str(spec)}
    assert [s["id"] for s in doc["steps"]] == ["spec-env", "build", "build-ray", "build-agent", "push"]
    for sid in ("spec-env", "build", "build-ray", "build-agent", "push"):
        r = _run_step(doc, sid, ws, subs, shims)
        assert r.returncode == 0, (sid, r.stderr)
    log = (tmp_path / "log").read_text()
    pushes = [ln.removeprefix("docker push ") for ln in log.splitlines() if ln.startswith("docker push ")]
    return log, pushes, ws


def _pushed_image(spec: Path, tmp_path: Path, shims: Path, monkeypatch) -> tuple[str, str]:
    """The docker calls and the one image the pipeline pushed (a spec without Ray)."""
    log, pushes, _ = _run_image_pipeline(spec, tmp_path, shims, monkeypatch)
    (push,) = pushes
    return log, push


def test_with_ray_on_the_pipeline_also_pushes_the_image_rayjobs_run(tmp_path: Path, shims: Path, monkeypatch):
    from infra.spec import load_spec
    from workloads.planning import images
    from workloads.planning.planner import Overrides, plan_run
    from workloads.ray import RAY_VERSION
    from workloads.render.rayjob import run_objects

    data = yaml.safe_load((REPO / "examples/default.yaml").read_text())
    data["cluster"]["ray"] = {"enabled": True}
    spec_file = tmp_path / "ray.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    log, pushes, ws = _run_image_pipeline(spec_file, tmp_path, shims, monkeypatch)
    repo = "us-west4-docker.pkg.dev/my-tpu-project/tpu-training"
    assert pushes == [f"{repo}/{images.MAXTEXT_IMAGE}", f"{repo}/{images.RAY_IMAGE}"]
    ctx = ws / ".tgk/ray-context"
    build = next(ln for ln in log.splitlines() if ln.startswith(f"docker build -f {ctx.relative_to(ws)}/Dockerfile"))
    assert f"--build-arg BASE={pushes[0]}" in build and f"--build-arg RAY_VERSION={RAY_VERSION}" in build
    assert build.endswith(f"-t {pushes[1]} {ctx.relative_to(ws)}")
    # The context holds what the RayJob's entrypoint imports, and nothing of the workspace's venv.
    shipped = sorted(str(f.relative_to(ctx)) for f in ctx.rglob("*") if f.is_file())
    assert "workloads/ray/jax_trainer.py" in shipped and "ray.constraints.txt" in shipped and "Dockerfile" in shipped
    assert not [f for f in shipped if "__pycache__" in f or f.startswith(".tgk")]
    # ... and it is the image the RayJob names, head and workers alike.
    plan = plan_run("llama3-8b", load_spec(spec_file), Overrides(runtime="ray", name="img"))
    images = {c["image"] for o in run_objects(plan) if o["kind"] == "RayJob" for c in _containers(o)}
    assert images == {pushes[1]}


def test_where_runs_restart_in_place_the_pipeline_builds_the_agent_image_their_pods_copy_it_from(tmp_path: Path, shims: Path, monkeypatch):
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render.jobset import run_objects

    data = yaml.safe_load((REPO / "examples/default.yaml").read_text())
    data["recovery"] = {"restart": "in-place"}
    spec_file = tmp_path / "in-place.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_file)
    log, pushes, _ = _run_image_pipeline(spec_file, tmp_path, shims, monkeypatch)
    agent = spec.in_place_agent_image
    assert pushes[-1] == agent and agent.endswith(f"/jobset-in-place-restart-agent:{spec.versions.jobset}")
    build = next(ln for ln in log.splitlines() if ln.startswith("docker build -f cloudbuild/jobset-agent/Dockerfile"))
    assert f"--build-arg JOBSET_VERSION={spec.versions.jobset}" in build and build.endswith(f"-t {agent} cloudbuild/jobset-agent")
    (js,) = run_objects(plan_run("maxtext-6b", spec, Overrides(name="ip", slices=2)))
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["initContainers"]] == [agent]
    # A spec whose runs recreate builds no agent image.
    other = tmp_path / "recreate"
    other.mkdir()
    _, pushes, _ = _run_image_pipeline(REPO / "examples/default.yaml", other, shims, monkeypatch)
    assert not any("jobset-in-place-restart-agent" in p for p in pushes)


def _containers(obj: dict) -> list[dict]:
    """Every container spec in an object, wherever it is nested."""
    found: list[dict] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            found.extend(c for c in x.get("containers", []) if isinstance(c, dict) and "image" in c)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(obj)
    return found


def test_the_ray_image_runs_the_entrypoint_the_rayjob_names() -> None:
    from workloads.ray import ENTRYPOINT_MODULE

    dockerfile = (CB / "ray" / "Dockerfile").read_text()
    assert "FROM ${BASE}" in dockerfile and "ray[default,train]==${RAY_VERSION}" in dockerfile
    assert f"import {ENTRYPOINT_MODULE}" in dockerfile  # the build fails if the entrypoint cannot import


def test_image_path_comes_from_the_spec(tmp_path: Path, shims: Path, monkeypatch):
    log, pushed = _pushed_image(REPO / "examples/default.yaml", tmp_path, shims, monkeypatch)
    image = "us-west4-docker.pkg.dev/my-tpu-project/tpu-training/maxtext:0.2.5"
    assert pushed == image
    assert f"-t {image} cloudbuild/maxtext" in log and "--build-arg MAXTEXT_VERSION=0.2.5" in log


@pytest.mark.parametrize("example", ["default.yaml", "tpu7x.yaml"])
def test_the_image_pipeline_pushes_what_the_recipes_pull(example: str, tmp_path: Path, shims: Path, monkeypatch):
    """Every recipe that runs in the MaxText image pulls exactly the reference the pipeline pushes."""
    from datetime import datetime

    from infra.spec import load_spec
    from workloads.planning import images, recipes
    from workloads.planning.planner import plan_run

    _, pushed = _pushed_image(EXAMPLES / example, tmp_path, shims, monkeypatch)
    spec = load_spec(EXAMPLES / example)
    in_image = [r.name for r in recipes.all_recipes() if (r.image.registry or "").split(":")[0] == images.MAXTEXT_IMAGE_NAME]
    assert {"maxtext-6b", "llama3-8b", "gpt3-6b", "hello-tpu"} <= set(in_image)
    now = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    from workloads.planning.select import why_not

    planned = 0
    for name in in_image:
        recipe = recipes.load_recipe(name)
        if recipe.kind.value == "sft":
            continue  # fine-tuning needs a conversation dataset of the spec: its image is checked with one in tests/test_fine_tuning.py
        if all(why_not(recipe, p.shape) for p in spec.tpu_pools):
            assert recipe.image.registry == images.MAXTEXT_IMAGE, name  # runs elsewhere (e.g. tpu7x only): same image
            continue
        assert plan_run(name, spec, now=now, rand="abc").program.image == pushed, name
        planned += 1
    assert planned >= 4


def test_a_recipe_pulling_another_maxtext_tag_is_refused():
    from workloads.planning import recipes
    from workloads.planning.recipe_model import ImageRef

    good = recipes.load_recipe("maxtext-6b")
    recipes.check_image(good)
    stale = good.model_copy(update={"image": ImageRef(registry="maxtext:0.2.5-py3.12")})
    with pytest.raises(
        recipes.RecipeError, match=r"image.registry: maxtext:0.2.5-py3.12 is not the image cloudbuild/image-maxtext.yaml pushes \(maxtext:0.2.5\)"
    ):
        recipes.check_image(stale)
    recipes.check_image(good.model_copy(update={"image": ImageRef(registry="other:1")}))  # not the MaxText image


# ------------------------------------------------------------------ behaviour: the CI test step


def test_ci_test_step_runs_dot_ci_run_with_go_and_node_22(tmp_path: Path, shims: Path, monkeypatch):
    """The toolchain steps copy Go and Node out of their images; the test step runs .ci/run with both on PATH.

    The images are stood in for by a GOROOT and an npm prefix on disk (reached through
    `go env GOROOT` and `npm prefix -g`, as in the real images); .ci/run by a script that
    records what it finds, so the test suite does not run itself.
    """
    log = tmp_path / "log"
    monkeypatch.setenv("TGK_TEST_LOG", str(log))
    doc = load(CB / "ci.yaml")
    go_image = {s["id"]: s["name"] for s in doc["steps"]}["go"]
    node_image = {s["id"]: s["name"] for s in doc["steps"]}["node"]
    go_version = go_image.split(":")[1].split("-")[0]
    node_version = node_image.split(":")[1].split("-")[0]
    # The versions the toolkit needs: README "Go >= 1.26"; scripts/setup.sh installs Node 22 (pinned in scripts/lib.sh) with this npm.
    assert tuple(int(x) for x in go_version.split(".")[:2]) >= (1, 26)
    setup_node = re.search(r'^node_version="(\d+)\.', (REPO / "scripts/lib.sh").read_text(), re.M).group(1)
    assert node_version.split(".")[0] == setup_node == "22"

    goroot = tmp_path / "image-go"
    (goroot / "bin").mkdir(parents=True)
    _shim(goroot / "bin", "go", f'echo "go version go{go_version} linux/amd64"\n')
    prefix = tmp_path / "image-node"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "node_modules" / "npm").mkdir(parents=True)
    _shim(prefix / "bin", "node", f'echo "v{node_version}"\n')
    _shim(prefix / "bin", "npm", 'echo "10.9.4"\n')
    # In the images, `go` and `npm` are on PATH: stand-ins that point at the trees above.
    image_shims = tmp_path / "image-shims"
    image_shims.mkdir()
    _shim(image_shims, "go", f'[ "$1 $2" = "env GOROOT" ] && echo {goroot} && exit 0\nexec {goroot}/bin/go "$@"\n')
    _shim(image_shims, "npm", f'[ "$1 $2" = "prefix -g" ] && echo {prefix} && exit 0\nexec {prefix}/bin/npm "$@"\n')

    ws = tmp_path / "ws"
    (ws / ".ci").mkdir(parents=True)
    _shim(ws / ".ci", "run", 'for t in go node npm; do echo "$t=$(command -v $t)" >> "$TGK_TEST_LOG"; done\nnode --version >> "$TGK_TEST_LOG"\n')
    subs = doc.get("substitutions") or {}
    for sid in ("go", "node"):
        r = _run_step(doc, sid, ws, subs, image_shims)
        assert r.returncode == 0, (sid, r.stderr)
    # The test step's image has neither go nor npm: only the workspace copies can answer.
    r = _run_step(doc, "test", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    assert f"go version go{go_version}" in r.stdout and f"v{node_version}" in r.stdout
    found = dict(ln.split("=", 1) for ln in log.read_text().splitlines() if "=" in ln)
    assert found == {"go": f"{ws}/.tgk/go/bin/go", "node": f"{ws}/.tgk/node/bin/node", "npm": f"{ws}/.tgk/node/bin/npm"}
    assert f"v{node_version}" in log.read_text().splitlines()


# ------------------------------------------------------------------ bootstrap_state_bucket: unit (fake client)

sys.path.insert(0, str(REPO / "scripts"))
import bootstrap_state_bucket as bsb  # noqa: E402


class _Iam:
    def __init__(self, ubla=False, pap="inherited"):
        self.uniform_bucket_level_access_enabled = ubla
        self.public_access_prevention = pap


class _Bucket:
    def __init__(self, name, ubla=False, pap="inherited", versioning=False, location="US"):
        self.name, self.location = name, location
        self.iam_configuration = _Iam(ubla, pap)
        self.versioning_enabled = versioning
        self.labels = {}
        self.patched = 0

    def patch(self):
        self.patched += 1


class FakeClient:
    def __init__(self, existing=None):
        self.existing = existing
        self.created = []

    def lookup_bucket(self, name):
        return self.existing if self.existing and self.existing.name == name else None

    def bucket(self, name):
        return _Bucket(name)

    def create_bucket(self, b, project=None, location=None):
        self.created.append((b, project, location))
        self.existing = b
        b.location = location.upper()
        return b


def test_fake_client_dry_run_changes_nothing(capsys):
    c = FakeClient()
    assert bsb.main(["--dry-run", "--spec", str(REPO / "examples/default.yaml")], client=c) == 0
    assert c.created == []
    assert capsys.readouterr().out.startswith("would create bucket gs://my-tpu-project-tf-state in project my-tpu-project: location us-west4")


def test_fake_client_create_then_idempotent(capsys):
    c = FakeClient()
    spec = str(REPO / "examples/v4.yaml")
    assert bsb.main(["--spec", spec], client=c) == 0
    ((b, project, location),) = c.created
    assert (b.name, project, location) == ("my-tpu-project-tf-state", "my-tpu-project", "us-central2")
    assert b.iam_configuration.uniform_bucket_level_access_enabled and b.iam_configuration.public_access_prevention == "enforced"
    assert b.versioning_enabled
    capsys.readouterr()
    assert bsb.main(["--spec", spec, "--output", "json"], client=c) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "none" and len(c.created) == 1 and b.patched == 0


def test_fake_client_tightens_a_weak_existing_bucket(capsys):
    weak = _Bucket("my-tpu-project-tf-state", location="EU")
    c = FakeClient(weak)
    assert bsb.main(["--spec", str(REPO / "examples/default.yaml")], client=c) == 0
    out = capsys.readouterr().out
    assert "turn on versioning" in out and "enforce public access prevention" in out and "EU" in out
    assert weak.patched == 1 and weak.versioning_enabled and c.created == []


def test_bad_spec_is_one_line(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/bootstrap_state_bucket.py"), "--spec", str(REPO / "tests/bad_specs/zero_slices.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: tpu_pools[0].slices:")


# ------------------------------------------------------------------ bootstrap_state_bucket: real emulator


@pytest.fixture(scope="module")
def gcs_emulator():
    """A real GCS-compatible emulator process on loopback (tests/support/gcs_emulator.py, as the storage tests use).

    It keeps buckets and PATCHed settings but drops some create-time fields (location,
    iamConfiguration, versioning), so those are checked on the request the client sent.
    An emulator that cannot be installed or started fails these tests; nothing is skipped.
    """
    with running_emulator() as url:
        yield url


def _recording_client(url: str, project: str):
    """A real storage client pointed at the emulator, recording each request it sends."""
    import requests
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    sent: list[tuple[str, str, dict]] = []
    session = requests.Session()

    def hook(resp, *a, **k):
        body = resp.request.body
        sent.append((resp.request.method, resp.request.url, json.loads(body) if body and body[:1] in (b"{", "{") else {}))

    session.hooks["response"].append(hook)
    client = storage.Client(project=project, credentials=AnonymousCredentials(), _http=session)
    return client, sent


def _spec_with_bucket(tmp_path: Path, bucket: str) -> Path:
    data = yaml.safe_load((REPO / "examples/v6e-reservation.yaml").read_text())
    data["state"] = {"bucket": bucket}
    p = tmp_path / "env.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_emulator_create_and_reuse(gcs_emulator, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    spec = _spec_with_bucket(tmp_path, "tgk-state-create")
    client, sent = _recording_client(gcs_emulator, "my-tpu-project")

    assert bsb.main(["--spec", str(spec), "--dry-run"], client=client) == 0
    assert "would create bucket gs://tgk-state-create" in capsys.readouterr().out
    assert client.lookup_bucket("tgk-state-create") is None
    assert not [r for r in sent if r[0] == "POST"]

    assert bsb.main(["--spec", str(spec)], client=client) == 0
    (post,) = [r for r in sent if r[0] == "POST"]
    body = post[2]
    assert body["name"] == "tgk-state-create"
    assert body["location"].lower() == "us-east5"
    assert body["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"] is True
    assert body["iamConfiguration"]["publicAccessPrevention"] == "enforced"
    assert body["versioning"] == {"enabled": True}
    assert "project=my-tpu-project" in post[1]
    assert client.get_bucket("tgk-state-create").name == "tgk-state-create"  # the server has it

    capsys.readouterr()
    sent.clear()
    assert bsb.main(["--spec", str(spec), "--output", "json"], client=client) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] in ("none", "update")
    assert not [r for r in sent if r[0] == "POST"], "a second run must not create again"
    assert [b.name for b in client.list_buckets()].count("tgk-state-create") == 1


def test_emulator_turns_on_versioning_of_an_existing_bucket(gcs_emulator, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    client, sent = _recording_client(gcs_emulator, "my-tpu-project")
    client.create_bucket("tgk-state-weak")
    assert not client.get_bucket("tgk-state-weak").versioning_enabled
    spec = _spec_with_bucket(tmp_path, "tgk-state-weak")
    assert bsb.main(["--spec", str(spec)], client=client) == 0
    assert "turn on versioning" in capsys.readouterr().out
    assert client.get_bucket("tgk-state-weak").versioning_enabled is True


def test_emulator_script_as_a_process(gcs_emulator, tmp_path: Path):
    """The shell entry point, end to end, with the client built from STORAGE_EMULATOR_HOST."""
    spec = _spec_with_bucket(tmp_path, "tgk-state-process")
    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_emulator, "TGK_PYTHON_BIN": sys.executable}

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(REPO / "scripts/bootstrap-state-bucket.sh"), "--spec", str(spec), *a], env=env, capture_output=True, text=True, timeout=60
        )

    dry = run("--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("would create"), dry.stderr
    first = run()
    assert first.returncode == 0 and first.stdout.startswith("create bucket gs://tgk-state-process"), first.stderr
    second = run("--output", "json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["action"] != "create"


# ------------------------------------------------------------------ a fleet file: every cluster, in order

FLEET = EXAMPLES / "fleet" / "fleet.yaml"
FLEET_CLUSTERS = ["tpu-west", "tpu-east", "tpu-fleet-mgr"]


def _fleet_workspace(tmp_path: Path, shims: Path, monkeypatch, spec: Path = FLEET) -> tuple[dict, dict[str, str], Path, Path]:
    log = tmp_path / "calls.log"
    log.write_text("")
    monkeypatch.setenv("TGK_TEST_LOG", str(log))
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    doc = load(CB / "provision.yaml")
    subs = {**doc["substitutions"], "_SPEC": str(spec)}
    r = _run_step(doc, "spec-env", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    return doc, subs, ws, log


def _members(ws: Path) -> list[dict[str, str]]:
    out = []
    for f in sorted((ws / ".tgk" / "members").glob("*.sh")):
        env = dict(line.removeprefix("export ").split("=", 1) for line in f.read_text().splitlines())
        out.append({k: v.strip("'") for k, v in env.items()})
    return out


def test_provision_reads_every_member_of_a_fleet_in_deploy_order(tmp_path: Path, shims: Path, monkeypatch):
    _doc, _subs, ws, _log = _fleet_workspace(tmp_path, shims, monkeypatch)
    members = _members(ws)
    assert [(m["TGK_CLUSTER"], m["TGK_ROLE"]) for m in members] == [("tpu-west", "worker"), ("tpu-east", "worker"), ("tpu-fleet-mgr", "manager")]
    assert [m["TGK_MEMBER_SPEC"] for m in members] == [str(FLEET.parent / "west.yaml"), str(FLEET.parent / "east.yaml"), str(FLEET)]
    assert members[2]["TGK_STATE_PREFIX"] == "tpu-gke-toolkit/tpu-fleet-mgr" and members[2]["TGK_CONTEXT"] == "gke_my-tpu-project_us-central1_tpu-fleet-mgr"
    assert "export TGK_FLEET=true" in (ws / ".tgk" / "env.sh").read_text()


def test_provision_applies_a_fleet_s_stacks_workers_first_and_wires_it_last(tmp_path: Path, shims: Path, monkeypatch):
    doc, subs, ws, log = _fleet_workspace(tmp_path, shims, monkeypatch)
    _shim(shims, "terraform", 'echo "terraform $*" >> "$TGK_TEST_LOG"\n')
    (ws / ".tgk" / "stack_dirs").write_text("".join(f"cdktn.out/stacks/{c}\n" for c in FLEET_CLUSTERS))  # what the synth step writes
    for step in ("tf-init", "tf-plan", "tf-apply"):
        r = _run_step(doc, step, ws, subs, shims)
        assert r.returncode == 0, f"{step}: {r.stderr}"
    tf = [ln.split()[1:3] for ln in log.read_text().splitlines() if ln.startswith("terraform")]
    want = [[f"-chdir=cdktn.out/stacks/{c}", cmd] for cmd in ("init", "plan", "apply") for c in FLEET_CLUSTERS]
    assert tf == want, "every member planned before any is applied; applied workers first, the manager last"
    # The Kueue objects: one `queues apply --fleet`, after every cluster's add-ons (the venv's python logs its arguments here).
    venv_python = ws / ".tgk" / "venv" / "bin" / "python"
    venv_python.write_text('#!/bin/sh\necho "python $*" >> "$TGK_TEST_LOG"\n')
    r = _run_step(doc, "kueue-objects", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    assert f"python -m workloads queues apply --fleet {FLEET}" in log.read_text()


def test_provision_installs_kueue_on_every_member_and_gives_the_manager_multikueue(tmp_path: Path, shims: Path, monkeypatch):
    release = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n"
    _fleet_workspace(tmp_path, shims, monkeypatch)  # the log path and workspace
    _shim(shims, "kubectl", f'echo "kubectl $*" >> "$TGK_TEST_LOG"\ncase "$*" in *"get configmap"*) printf \'%s\' "{release}";; esac\n')
    doc, subs, ws, log = _fleet_workspace(tmp_path, shims, monkeypatch)
    for step in ("install-jobset-kueue", "kueue-config-read", "kueue-config-merge", "kueue-config-apply"):
        r = _run_step(doc, step, ws, subs, shims)
        assert r.returncode == 0, f"{step}: {r.stderr}"
    contexts = [m["TGK_CONTEXT"] for m in _members(ws)]
    installs = [ln.split()[2] for ln in log.read_text().splitlines() if "apply --server-side -f https://github.com/kubernetes-sigs/kueue/" in ln]
    assert installs == contexts
    merged = [yaml.safe_load((ws / ".tgk" / f"kueue-config.0{i}.merged.yaml").read_text()) for i in (1, 2, 3)]
    assert "multiKueue" not in merged[0] and "multiKueue" not in merged[1]
    assert merged[2]["multiKueue"]["origin"] == "tpu-fleet" and merged[2]["waitForPodsReady"]["timeout"]
    restarts = [ln.split()[2] for ln in log.read_text().splitlines() if "rollout restart" in ln]
    assert restarts == contexts


def test_provision_credentials_name_each_context_as_the_fleet_reaches_it(tmp_path: Path, shims: Path, monkeypatch):
    named = tmp_path / "named"
    named.mkdir()
    for n in ("west", "east"):
        (named / f"{n}.yaml").write_text((FLEET.parent / f"{n}.yaml").read_text())
    doc_text = FLEET.read_text().replace("  - name: east\n    spec: east.yaml\n", "  - name: east\n    spec: east.yaml\n    context: east-admin\n")
    (named / "fleet.yaml").write_text(doc_text)
    doc, subs, ws, log = _fleet_workspace(tmp_path, shims, monkeypatch, named / "fleet.yaml")
    _shim(shims, "gcloud", 'echo "gcloud $*" >> "$TGK_TEST_LOG"\n')
    r = _run_step(doc, "credentials", ws, subs, shims)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert [ln.split()[4] for ln in text.splitlines() if "get-credentials" in ln] == FLEET_CLUSTERS
    assert "kubectl config rename-context gke_my-tpu-project_us-east5_tpu-east east-admin" in text
    assert "kubectl config set-context east-admin --user=tgk-build" in text


def test_provision_refuses_a_fleet_member_with_a_kubeconfig_file_of_its_own(tmp_path: Path, shims: Path, monkeypatch):
    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.read_text().replace("  cluster: tpu-fleet-mgr ", "  kubeconfig: mgr.kubeconfig\n  cluster: tpu-fleet-mgr "))
    for n in ("west", "east"):
        (tmp_path / f"{n}.yaml").write_text((FLEET.parent / f"{n}.yaml").read_text())
    ws = tmp_path / "ws"
    ws.mkdir()
    doc = load(CB / "provision.yaml")
    r = _run_step(doc, "spec-env", ws, {**doc["substitutions"], "_SPEC": str(fleet)}, shims)
    assert r.returncode == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: manager.kubeconfig: the provision pipeline reaches every member"), line


def test_destroy_of_a_fleet_goes_manager_first_and_checks_every_member_first(tmp_path: Path, shims: Path, monkeypatch):
    monkeypatch.setenv("TGK_TEST_LOG", str(tmp_path / "log"))
    _shim(shims, "terraform", 'echo "terraform $*" >> "$TGK_TEST_LOG"\n')
    doc = load(CB / "destroy.yaml")
    unprotected = tmp_path / "unprotected"
    unprotected.mkdir()
    (unprotected / "fleet.yaml").write_text(FLEET.read_text())
    for n in ("west", "east"):
        data = yaml.safe_load((FLEET.parent / f"{n}.yaml").read_text())
        data["cluster"]["deletion_protection"] = False
        (unprotected / f"{n}.yaml").write_text(yaml.safe_dump(data))
    for fleet, protected in ((FLEET, True), (unprotected / "fleet.yaml", False)):
        (tmp_path / "log").write_text("")
        ws = tmp_path / f"ws-{protected}"
        ws.mkdir()
        subs = {**doc["substitutions"], "_SPEC": str(fleet)}
        assert _run_step(doc, "spec-env", ws, subs, shims).returncode == 0
        (ws / ".tgk" / "stack_dirs").write_text("".join(f"cdktn.out/stacks/{c}\n" for c in FLEET_CLUSTERS))
        r = _run_step(doc, "tf-destroy", ws, subs, shims)
        calls = [ln.split()[1] for ln in (tmp_path / "log").read_text().splitlines() if ln.startswith("terraform")]
        if protected:
            assert r.returncode == 2 and "deletion_protection" in r.stderr and calls == [], r.stderr
        else:
            assert r.returncode == 0, r.stderr
            assert calls == [f"-chdir=cdktn.out/stacks/{c}" for c in reversed(FLEET_CLUSTERS)]
