"""Credentials are never printed, written or carried as plain values (toolkit/credentials.py, workloads/planning/secret_env.py).

- a MaxText key that holds one (``hf_access_token``), an environment variable named as one
  (``HF_TOKEN``) or a URL with a password, from ``--set``, a recipe or an imported script: one
  line, exit 2, the value in neither stdout nor stderr, nothing rendered;
- ``--secret-env NAME=SECRET/KEY`` (and a recipe's ``secret_env``) renders a ``secretKeyRef`` in
  every runtime's workers, and the render of such a run holds no value at all;
- a malformed reference is one line naming ``--secret-env``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support import cli
from workloads.planning.maxtext_keys import maxtext_keys, secret_keys

VALUE = "hf_tHiSiSaSeCrEtVaLuE0123"


def wl(*args: str, **kw):
    return cli("workloads", *args, **kw)


def _refused(r, field: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and r.stderr.startswith(f"error: {field}"), r.stderr
    assert VALUE not in r.stdout + r.stderr
    return r.stderr


def test_the_secret_keys_are_maxtext_keys() -> None:
    assert secret_keys() and secret_keys() <= maxtext_keys()


@pytest.mark.parametrize("verb", ["submit", "render"])
def test_a_secret_maxtext_key_as_a_plain_value_is_refused_and_nothing_is_written(verb: str, tmp_path: Path) -> None:
    out = tmp_path / "tree"
    extra = ["--dry-run"] if verb == "submit" else ["--out", str(out)]
    line = _refused(wl(verb, "maxtext-6b", "--set", f"hf_access_token={VALUE}", *extra), "--set")
    assert "--secret-env HF_TOKEN=SECRET/KEY" in line
    assert not out.exists()


def test_a_url_with_a_password_is_refused_without_printing_it() -> None:
    line = _refused(wl("submit", "maxtext-6b", "--set", f"tokenizer_path=https://me:{VALUE}@hub.example/t", "--dry-run"), "--set")
    assert "user:password@" in line and "--secret-env" in line


def _recipe_dir(tmp_path: Path, **fields) -> Path:
    d = tmp_path / "recipes"
    d.mkdir()
    base = yaml.safe_load((Path(__file__).resolve().parent.parent / "workloads" / "recipes" / "maxtext-6b.yaml").read_text())
    args = fields.pop("maxtext_args", {})
    base.update(name="leaky", **fields)
    base["maxtext"]["args"] = {**base["maxtext"].get("args", {}), **args}
    (d / "leaky.yaml").write_text(yaml.safe_dump(base))
    return d


@pytest.mark.parametrize(
    "fields",
    [
        {"env": {"HF_TOKEN": VALUE}},
        {"env": {"WANDB_API_KEY": VALUE}},
        {"maxtext_args": {"hf_access_token": VALUE}},
        {"secret_env": {"HF_TOKEN": "Not_A_Secret_Name/token"}},
    ],
    ids=["env-hf-token", "env-api-key", "maxtext-arg", "bad-reference"],
)
def test_a_recipe_carrying_a_credential_is_refused(fields: dict, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_RECIPES", str(_recipe_dir(tmp_path, **fields)))
    r = wl("submit", "leaky", "--dry-run")
    assert r.returncode == 2 and VALUE not in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "secret" in r.stderr.lower(), r.stderr


RUNTIMES = [("maxtext-6b", "jobset"), ("maxtext-6b", "job"), ("llama3-8b", "ray")]


@pytest.mark.parametrize(("recipe", "runtime"), RUNTIMES)
def test_secret_env_renders_a_secret_key_ref_in_every_runtime(recipe: str, runtime: str) -> None:
    r = wl("submit", recipe, "--runtime", runtime, "--secret-env", "HF_TOKEN=hf-token/token", "--dry-run")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("name") == "HF_TOKEN" and "valueFrom" in node:
                refs.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(docs)
    assert refs and all(ref == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} for ref in refs), refs
    assert "value: hf" not in r.stdout


def test_the_render_of_a_secret_bearing_run_holds_no_value(tmp_path: Path, monkeypatch) -> None:
    """A recipe's secret_env and --secret-env: the tree holds references, and nothing the Secret holds."""
    monkeypatch.setenv("TGK_RECIPES", str(_recipe_dir(tmp_path, secret_env={"HF_TOKEN": "hf-token/token"})))
    out = tmp_path / "tree"
    r = wl("render", "leaky", "--secret-env", "WANDB_API_KEY=wandb/key", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = "\n".join(p.read_text() for p in out.rglob("*.yaml"))
    assert "secretKeyRef" in text and "hf-token" in text and "wandb" in text
    named = [e for p in out.rglob("patch-*.yaml") for e in _named(yaml.safe_load(p.read_text()), {"HF_TOKEN", "WANDB_API_KEY"})]
    assert {e["name"] for e in named} == {"HF_TOKEN", "WANDB_API_KEY"}
    assert all(set(e) == {"name", "valueFrom"} and set(e["valueFrom"]) == {"secretKeyRef"} for e in named), named


def _named(node, names: set[str]) -> list[dict]:
    """Every mapping in ``node`` whose name is one of ``names`` (an env entry, wherever the patch puts it)."""
    if isinstance(node, dict):
        own = [node] if node.get("name") in names else []
        return own + [e for v in node.values() for e in _named(v, names)]
    if isinstance(node, list):
        return [e for v in node for e in _named(v, names)]
    return []


@pytest.mark.parametrize(
    "ref",
    ["HF_TOKEN", "HF_TOKEN=hf-token", "HF_TOKEN=Bad_Name/token", "HF_TOKEN=hf-token/bad key", "BAD=NAME=x/y", "=hf-token/token"],
)
def test_a_malformed_reference_is_one_line(ref: str) -> None:
    line = _refused(wl("submit", "maxtext-6b", "--secret-env", ref, "--dry-run"), "--secret-env")
    assert "NAME=SECRET/KEY" in line or "HF_TOKEN=hf-token/token" in line


def test_a_reference_named_like_a_plain_variable_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_RECIPES", str(_recipe_dir(tmp_path, env={"MODE": "fast"})))
    _refused(wl("submit", "leaky", "--secret-env", "MODE=s/k", "--dry-run"), "--secret-env")


def test_an_imported_script_s_credentials_are_not_carried(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(
        "xpk workload create --cluster c --workload w --tpu-type=v5litepod-16 --num-slices=1 "
        "--docker-image=us-docker.pkg.dev/p/r/maxtext:1 --env HF_TOKEN=" + VALUE + " "
        f'--command "python3 -m MaxText.train MaxText/configs/base.yml run_name=x hf_access_token={VALUE} steps=10 per_device_batch_size=1"\n'
    )
    out = tmp_path / "out"
    r = wl("import-recipe", str(script), "--out", str(out))
    assert r.returncode == 0, r.stderr
    written = "\n".join(p.read_text() for p in out.rglob("*"))
    assert VALUE not in written + r.stdout + r.stderr
    assert "--secret-env HF_TOKEN=SECRET/KEY" in r.stderr
