"""Bad input, by class: how much of each class the CLIs refuse cleanly.

    python scripts/bench_bad_input.py [-v] [--jobs N] [--class NAME]

Runs a corpus of bad inputs through the real CLIs (``python -m infra ...``,
``python -m workloads ...``, each a fresh interpreter as a user's is) and prints,
per class, how many are refused cleanly and how many are accepted or crash.

Refused cleanly means all of:
  - exit code 2;
  - stderr is exactly one non-empty line, starting ``error: ``;
  - no traceback on stdout or stderr;
  - the line names what is wrong (each case's ``expect`` text);
  - nothing written: the case's working directory (the cwd of the command and
    where its files and ``--out`` live) holds exactly what it held before.

Recipes are shipped files, not a flag; their cases run the same CLI with the recipe
directory pointed at a scratch copy (``TGK_BENCH_RECIPES``).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import os
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = yaml.safe_load((REPO / "examples" / "default.yaml").read_text())
TINY_LOG = REPO / "tests" / "data" / "maxtext" / "tiny_cpu.log"
UNWRITABLE = "/proc/tgk-bench/out"  # /proc refuses new directories, even to root
UNDER_A_FILE = "/etc/hostname/out"  # a parent that is a regular file

# Runs the workloads CLI with the recipe directory moved to $TGK_BENCH_RECIPES.
RECIPE_SHIM = (
    "import os, pathlib, sys\n"
    "import workloads.planning.recipes as r\n"
    "r.RECIPES_DIR = pathlib.Path(os.environ['TGK_BENCH_RECIPES'])\n"
    "from workloads.cli import main\n"
    "main()\n"
)

CLASSES = (
    "accelerator-vs-generation",
    "empty-list",
    "long-derived-name",
    "duplicate-yaml-key",
    "non-utf8-file",
    "numeric-domain",
    "unwritable-output",
    "wrong-blame",
)


@dataclass
class Case:
    cls: str
    id: str
    argv: list[str]  # after `python`; {F} is the spec file, {D} the case directory
    expect: str  # text the one error line must contain
    files: dict[str, bytes] = field(default_factory=dict)  # written into the case directory
    recipes: dict[str, bytes] | None = None  # a scratch recipe directory (shipped recipes + these)


# ------------------------------------------------------------------ builders


def spec_yaml(mutate=None) -> bytes:
    data = copy.deepcopy(DEFAULT_SPEC)
    if mutate:
        mutate(data)
    return yaml.safe_dump(data, sort_keys=False).encode()


def pool(**kw):
    def m(d):
        d["tpu_pools"][0].update(kw)

    return m


def team(**kw):
    def m(d):
        d["teams"][0].update(kw)

    return m


def shipped_recipe(name: str) -> str:
    return (REPO / "workloads" / "recipes" / f"{name}.yaml").read_text()


def recipe_with(name: str, old: str, new: str) -> dict[str, bytes]:
    text = shipped_recipe(name)
    assert old in text, (name, old)
    return {f"{name}.yaml": text.replace(old, new, 1).encode()}


SPEC_CMD = ["-m", "infra", "spec", "--spec", "{F}"]
SUBMIT = ["-m", "workloads", "submit"]


def submit(*args: str, spec: bool = False) -> list[str]:
    return [*SUBMIT, *args, *(["--spec", "{F}"] if spec else []), "--dry-run"]


def spec_cases(cls: str, id_: str, content: bytes, expect: str, *, also_submit: bool = False, also_queues: bool = False) -> list[Case]:
    out = [Case(cls, f"{id_}/infra-spec", SPEC_CMD, expect, {"spec.yaml": content})]
    if also_submit:
        out.append(Case(cls, f"{id_}/submit", submit("maxtext-6b", spec=True), expect, {"spec.yaml": content}))
    if also_queues:
        out.append(Case(cls, f"{id_}/queues", ["-m", "workloads", "queues", "apply", "--dry-run", "--spec", "{F}"], expect, {"spec.yaml": content}))
    return out


def corpus() -> list[Case]:
    cases: list[Case] = []
    add = cases.extend

    # 1. an accelerator type that contradicts the generation
    c = "accelerator-vs-generation"
    add(spec_cases(c, "v5e-type-v6e-gen", spec_yaml(pool(type="v5litepod-16", generation="v6e", topology="4x4")), "generation", also_submit=True))
    add(spec_cases(c, "v6e-type-v5e-gen", spec_yaml(pool(type="v6e-16", generation="v5e", topology="4x4")), "generation"))
    add(spec_cases(c, "v4-type-v5p-gen", spec_yaml(pool(type="v4-16", generation="v5p", topology="2x2x2")), "generation"))
    add(spec_cases(c, "v5e-type-v6e-gen-no-topology", spec_yaml(pool(type="v5litepod-16", generation="v6e")), "tpu_pools[0].generation"))
    add(spec_cases(c, "tpu7x-type-v5p-gen", spec_yaml(pool(type="tpu7x-32", generation="v5p", topology="2x2x4", slices=1)), "generation"))

    # 2. an empty list where at least one item is needed
    c = "empty-list"
    empty_teams = spec_yaml(lambda d: d.update(teams=[]))
    add(spec_cases(c, "teams", empty_teams, "teams", also_submit=True, also_queues=True))
    add(spec_cases(c, "tpu_pools", spec_yaml(lambda d: d.update(tpu_pools=[])), "tpu_pools"))
    add(spec_cases(c, "zones", spec_yaml(lambda d: d.update(zones=[])), "zones"))
    cases.append(Case(c, "teams/status", ["-m", "workloads", "status", "r1", "--spec", "{F}", "--kubeconfig", "{D}/none"], "teams", {"spec.yaml": empty_teams}))
    cases.append(
        Case(
            c,
            "recipe-generations",
            ["-c", RECIPE_SHIM, "submit", "maxtext-6b", "--dry-run"],
            "generations",
            recipes=recipe_with("maxtext-6b", "min_chips_per_slice: 4", "min_chips_per_slice: 4\ngenerations: []"),
        )
    )
    cases.append(
        Case(
            c,
            "recipe-command-item",
            ["-c", RECIPE_SHIM, "submit", "hello-tpu", "--dry-run"],
            "command",
            recipes={"hello-tpu.yaml": shipped_recipe("hello-tpu").split("command:")[0].encode() + b"command: ['']\n"},
        )
    )

    # 3. names derived from user input beyond Kubernetes/GCP limits
    c = "long-derived-name"
    ns60 = spec_yaml(team(namespace="n" * 60))
    add(spec_cases(c, "namespace-60", ns60, "teams[0]", also_submit=True, also_queues=True))
    add(spec_cases(c, "network-router", spec_yaml(lambda d: (d.update(network={"name": "n" * 60}), d["cluster"].update(private_nodes=True))), "network.name"))
    add(spec_cases(c, "ci-sa-id-too-short", spec_yaml(lambda d: d["cluster"].update(name="ab")), "cluster.name"))

    # 4. duplicate keys in YAML
    c = "duplicate-yaml-key"
    base = spec_yaml().decode()
    add(spec_cases(c, "capacity-twice", base.replace("  capacity: spot\n", "  capacity: spot\n  capacity: on-demand\n").encode(), "capacity", also_submit=True))
    add(spec_cases(c, "top-level-region", (base + "region: us-west4\n").encode(), "region"))
    add(spec_cases(c, "team-priority", base.replace("  priority: medium\n", "  priority: medium\n  priority: high\n").encode(), "priority"))
    cases.append(
        Case(
            c,
            "recipe-steps",
            ["-c", RECIPE_SHIM, "submit", "maxtext-6b", "--dry-run"],
            "steps",
            recipes=recipe_with("maxtext-6b", "steps: 100\n", "steps: 100\nsteps: 5\n"),
        )
    )

    # 5. files that are not UTF-8 text
    c = "non-utf8-file"
    good = spec_yaml()
    variants = {
        "binary": bytes(range(256)) * 4,
        "gzip": gzip.compress(good),
        "utf16-bom": good.decode().encode("utf-16"),
        "latin1": good.replace(b"# ", b"# caf\xe9 ") if b"# " in good else b"# caf\xe9\n" + good,
    }
    for name, content in variants.items():
        add(spec_cases(c, f"spec-{name}", content, "spec.yaml: ", also_submit=name in ("gzip", "utf16-bom")))  # names the file
    cases.append(
        Case(
            c,
            "recipe-utf16",
            ["-c", RECIPE_SHIM, "submit", "maxtext-6b", "--dry-run"],
            "recipe",
            recipes={"maxtext-6b.yaml": shipped_recipe("maxtext-6b").encode("utf-16")},
        )
    )
    cases.append(
        Case(
            c,
            "kubeconfig-utf16",
            ["-m", "workloads", "status", "r1", "--kubeconfig", "{D}/kc"],
            "kubeconfig",
            {"kc": "apiVersion: v1\nkind: Config\nclusters: []\n".encode("utf-16")},
        )
    )
    cases.append(
        Case(c, "metrics-logfile-binary", ["-m", "workloads", "metrics", "{D}/run.log"], "MaxText", {"run.log": bytes(range(256)) * 8})
    )  # read leniently: the line need not name the flag
    cases.append(
        Case(
            c,
            "metrics-file-gzip",
            ["-m", "workloads", "metrics", str(TINY_LOG), "--metrics-file", "{D}/m.jsonl"],
            "metrics file",
            {"m.jsonl": gzip.compress((REPO / "tests/data/maxtext/tiny_cpu.metrics.jsonl").read_bytes())},
        )
    )

    # 6. numeric overrides outside their domain
    c = "numeric-domain"
    for kv in (
        "max_target_length=0",
        "max_target_length=-2048",
        "per_device_batch_size=inf",
        "per_device_batch_size=nan",
        "per_device_batch_size=0",
        "base_emb_dim=-4096",
        "ici_fsdp_parallelism=0",
        "override_model_config=maybe",
    ):
        cases.append(Case(c, f"set-{kv}", submit("maxtext-6b", "--set", kv), "--set"))
    cases.append(
        Case(
            c,
            "recipe-max_target_length-0",
            ["-c", RECIPE_SHIM, "submit", "maxtext-6b", "--dry-run"],
            "max_target_length",
            recipes=recipe_with("maxtext-6b", "    log_period: 10\n", "    log_period: 10\n    max_target_length: 0\n"),
        )
    )
    cases.append(Case(c, "steps-negative", submit("maxtext-6b", "--steps", "-5"), "--steps"))

    # 7. output paths that cannot be written
    c = "unwritable-output"
    for where, path in (("proc", UNWRITABLE), ("under-file", UNDER_A_FILE)):
        cases.append(Case(c, f"render-{where}", ["-m", "workloads", "render", "maxtext-6b", "--out", path], "--out"))
        cases.append(Case(c, f"report-{where}", ["-m", "workloads", "report", str(TINY_LOG), "--out", path], "--out"))
        cases.append(Case(c, f"run-local-{where}", ["-m", "workloads", "run-local", "maxtext-6b", "--tiny", "--out", path], "--out"))
        cases.append(Case(c, f"synth-{where}", ["-m", "infra", "synth", "--out", path], "--out"))
        cases.append(Case(c, f"plan-{where}", ["-m", "infra", "plan", "--dry-run", "--out", path], "--out"))
    cases.append(Case(c, "report-out-is-file", ["-m", "workloads", "report", str(TINY_LOG), "--out", "{D}/f"], "--out", {"f": b"x"}))
    cases.append(Case(c, "synth-out-is-file", ["-m", "infra", "synth", "--out", "{D}/f"], "--out", {"f": b"x"}))
    cases.append(Case(c, "preflight-keep-logs", ["-m", "workloads", "preflight", "maxtext-6b", "--compile", "--keep-logs", UNWRITABLE], "--keep-logs"))

    # 8. messages that blame the wrong thing
    c = "wrong-blame"
    add(spec_cases(c, "spot-under-flex-start", spec_yaml(pool(capacity={"mode": "flex-start", "spot": True})), "spot"))
    add(spec_cases(c, "name-under-spot", spec_yaml(pool(capacity={"mode": "spot", "name": "r1"})), "capacity.name"))
    cases.append(Case(c, "set-base_emb_dim-5000", submit("maxtext-6b", "--set", "base_emb_dim=5000"), "error: --set: base_emb_dim"))
    cases.append(
        Case(
            c,
            "set-max_target_length-odd-seq",
            submit("maxtext-6b", "--set", "max_target_length=2047", "--set", "ici_sequence_parallelism=2", "--set", "ici_fsdp_parallelism=-1"),
            "error: --set",
        )
    )
    add(spec_cases(c, "type-and-generation", spec_yaml(pool(type="v5litepod-16", generation="v6e")), "tpu_pools[0].generation"))
    cases.append(
        Case(
            c,
            "recipe-max_target_length-text",
            ["-c", RECIPE_SHIM, "submit", "maxtext-6b", "--dry-run"],
            "error: recipe maxtext-6b",
            recipes=recipe_with("maxtext-6b", "    log_period: 10\n", "    log_period: 10\n    max_target_length: long\n"),
        )
    )
    return cases


# ------------------------------------------------------------------ running


@dataclass
class Result:
    case: Case
    clean: bool
    why: str
    line: str


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def run_case(case: Case, tmp: Path) -> Result:
    d = tmp / case.id.replace("/", "_").replace("=", "_")
    d.mkdir(parents=True)
    for name, content in case.files.items():
        (d / name).write_bytes(content)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "COLUMNS": "200",
        "NO_COLOR": "1",
        "TGK_MAXTEXT_VENV": str(d / "no-maxtext-venv"),
    }
    env.pop("TGK_SPEC", None)
    env.pop("TGK_DEBUG", None)
    if case.recipes is not None:
        rdir = tmp / f"recipes-{d.name}"
        rdir.mkdir()
        for p in (REPO / "workloads" / "recipes").glob("*.yaml"):
            (rdir / p.name).write_bytes(p.read_bytes())
        for name, content in case.recipes.items():
            (rdir / name).write_bytes(content)
        env["TGK_BENCH_RECIPES"] = str(rdir)
    argv = [a.replace("{F}", str(d / "spec.yaml")).replace("{D}", str(d)) for a in case.argv]
    before = _tree(d)
    try:
        p = subprocess.run([sys.executable, *argv], cwd=d, env=env, capture_output=True, text=True, errors="replace", timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return Result(case, False, "timed out", "")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    after = _tree(d)
    if "Traceback" in p.stderr or "Traceback" in p.stdout:
        why = "traceback: " + (lines[-1] if lines else "")
    elif p.returncode != 2:
        why = f"exit {p.returncode}" + (f": {line}" if line else " (accepted)")
    elif len(lines) != 1:
        why = f"{len(lines)} stderr lines"
    elif not line.startswith("error: "):
        why = "line does not start with 'error: '"
    elif case.expect not in line:
        why = f"does not name {case.expect!r}: {line}"
    elif after != before:
        why = f"wrote {sorted(after - before)[:3]}"
    else:
        return Result(case, True, "", line)
    return Result(case, False, why, line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--class", dest="only", choices=CLASSES)
    args = ap.parse_args()
    cases = [c for c in corpus() if args.only in (None, c.cls)]
    with tempfile.TemporaryDirectory(prefix="tgk-bench-bad-") as tmp, ThreadPoolExecutor(args.jobs) as pool_:
        results = list(pool_.map(lambda c: run_case(c, Path(tmp)), cases))
    clean: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for r in results:
        total[r.case.cls] += 1
        clean[r.case.cls] += r.clean
        if args.verbose or not r.clean:
            mark = "ok  " if r.clean else "FAIL"
            detail = r.line if r.clean else r.why
            print(f"  {mark} {r.case.cls:<26} {r.case.id:<42} {detail[:150]}")
    print(f"\n{'class':<28}{'refused cleanly':>16}{'accepted/crash':>16}{'total':>7}")
    for c in CLASSES:
        if total[c]:
            print(f"{c:<28}{clean[c]:>16}{total[c] - clean[c]:>16}{total[c]:>7}")
    n, k = sum(total.values()), sum(clean.values())
    print(f"{'all':<28}{k:>16}{n - k:>16}{n:>7}")


if __name__ == "__main__":
    main()
