"""The pinned MaxText environment, and running a RunPlan's MaxText command locally.

MaxText (Python >= 3.12, ~2.8 GB of jax/libtpu) lives in its own venv built by
``scripts/setup-maxtext.sh``; the toolkit never imports it, it runs that venv's python
as a subprocess with an argument list, through the toolkit's one runner
(``toolkit.tools.run``). This module is the one place that:

- finds (or builds on demand) that venv: ``$TGK_MAXTEXT_VENV``, else the setup script;
- turns a RunPlan's args/env — exactly what the JobSet runs — into a local invocation.

Local deviations from the JobSet's command, all of them here and nowhere else:

- ``base_output_directory`` (a gs:// path in the plan) becomes a local directory: there
  are no credentials or network here; ``gcs_metrics=false`` with it (MaxText would upload
  its metrics files to that directory as if it were a bucket).
- ``jax_cache_dir=`` (off) and ``dump_hlo_local_dir=<workdir>/xla_dump/`` so nothing is
  written to ``~/jax_cache`` or ``/tmp/xla_dump`` (MaxText's defaults).
- ``ALLOW_MULTIPLE_LIBTPU_LOAD=1``: no TPU to guard, so concurrent local checks must not
  fight over libtpu's lockfile.
- ``JAX_PLATFORMS=cpu``: the plan's ``tpu,cpu`` makes JAX fail on a machine without a
  TPU ("Unable to initialize backend 'tpu'"). AOT compilation targets the TPU topology
  through libtpu's topology API whatever the runtime backend is, so this changes the
  host backend only, not what is compiled.

Every other argument and every other env var (``M_*``, ``LIBTPU_INIT_ARGS``, ...) stays
as the plan has it. The rest of the caller's environment is NOT inherited (only PATH,
HOME, locale and TMPDIR are), so a stray ``M_*`` in a user's shell cannot change what
is checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit import tools
from toolkit.errors import ExternalToolError, ToolkitError
from toolkit.paths import script
from workloads.planning.images import MAXTEXT_VERSION

if TYPE_CHECKING:
    from infra.catalog import SliceShape

SETUP_SCRIPT = script("setup-maxtext.sh")
DRIVER = Path(__file__).resolve().parent / "driver.py"
TRAIN_COMPILE_MODULE = "maxtext.trainers.pre_train.train_compile"
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")

# Catalog generation -> MaxText's compile_topology prefix (utils/accelerator_to_spec_map.py).
# MaxText counts chips for v5e/v6e and TensorCores for v4/v5p/tpu7x, like the Cloud
# accelerator types (SliceShape.accelerator_count), so only v5e's "v5litepod" prefix differs.
_TOPOLOGY_PREFIX = {"v5e": "v5e", "v6e": "v6e", "v4": "v4", "v5p": "v5p", "tpu7x": "tpu7x"}


class MaxTextEnvError(ExternalToolError):
    """The MaxText venv could not be found or built.

    Exit 4, like a failed compile: 1 means "does not fit" for preflight --compile.
    """

    exit_code = 4


def compile_topology(shape: SliceShape) -> str:
    """MaxText's compile_topology name for a slice, e.g. v5e 4x4 (v5litepod-16) -> v5e-16."""
    generation = shape.generation.name
    if generation not in _TOPOLOGY_PREFIX:
        raise ToolkitError(f"no MaxText compile topology for generation {generation!r}")
    return f"{_TOPOLOGY_PREFIX[generation]}-{shape.accelerator_count}"


def locate(*, log=None) -> Path:
    """The MaxText venv directory; builds it with scripts/setup-maxtext.sh if needed.

    ``$TGK_MAXTEXT_VENV`` wins (a prebuilt venv, e.g. in CI images). Building takes
    ~2-8 min and ~2.8 GB the first time; the script caches it outside the repository
    and answers in ~0.1 s afterwards.
    """
    env_path = os.environ.get("TGK_MAXTEXT_VENV")
    if env_path:
        venv = Path(env_path)
        if not (venv / "bin" / "python").exists():
            raise MaxTextEnvError(f"TGK_MAXTEXT_VENV={env_path} has no bin/python — unset it or run scripts/setup-maxtext.sh")
        return venv
    if not SETUP_SCRIPT.exists():
        raise MaxTextEnvError(f"no MaxText venv: set TGK_MAXTEXT_VENV to a venv with maxtext[tpu]=={MAXTEXT_VERSION} (Python 3.12)")
    if log is not None:
        log(f"locating the MaxText {MAXTEXT_VERSION} venv (scripts/setup-maxtext.sh; the first build takes a few minutes)")
    return tools.script_path(SETUP_SCRIPT, what=f"cannot set up the MaxText {MAXTEXT_VERSION} venv", error=MaxTextEnvError, holds="bin/python")


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


# ----------------------------------------------------------------- args and env


def _key(arg: str) -> str | None:
    key, eq, _ = arg.partition("=")
    return key if eq else None


def local_args(plan_args: Sequence[str], workdir: Path, extra: Mapping[str, str] | None = None) -> list[str]:
    """The plan's MaxText args with the local substitutions; ``extra`` replaces or appends.

    Keys keep their position (a replaced key stays where the plan put it), so the
    command reads the same as the JobSet's. No key appears twice: MaxText would
    silently take the last one.
    """
    subs: dict[str, str] = {
        "base_output_directory": str(workdir / "output"),
        "gcs_metrics": "false",
        "jax_cache_dir": "",
        "dump_hlo_local_dir": f"{workdir / 'xla_dump'}/",
    }
    subs.update(extra or {})
    out: list[str] = []
    done: set[str] = set()
    for arg in plan_args:
        k = _key(arg)
        if k is not None and k in subs:
            out.append(f"{k}={subs[k]}")
            done.add(k)
        else:
            out.append(arg)
    out.extend(f"{k}={v}" for k, v in subs.items() if k not in done)
    return out


def local_env(plan_env: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The plan's env over a minimal base, with JAX_PLATFORMS=cpu (see the module doc)."""
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env.update(dict(plan_env))
    env["JAX_PLATFORMS"] = "cpu"
    # libtpu takes /tmp/libtpu_lockfile to guard a physical TPU; there is none here, and
    # without this a second concurrent check (an xdist worker, another user) aborts with
    # "Internal error when accessing libtpu multi-process lockfile". JAX's own
    # multi-process tests set the same variable.
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    # Python writes bytecode caches into the venv; harmless, but keep stdout unbuffered so
    # a killed run still leaves its last lines in the log.
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# ----------------------------------------------------------------- running


def run(argv: Sequence[str], env: Mapping[str, str], workdir: Path, name: str, *, timeout: float | None = None) -> tools.Completed:
    """Run a command in ``workdir`` with output to ``workdir/<name>.{stdout,stderr}``.

    Through the one runner (``toolkit.tools.run``): files, not pipes (MaxText logs
    megabytes to stderr and a full pipe would stall it); the child's own peak RSS
    (``wait4``); a timeout kills its whole process group and sets ``timed_out``. A
    program that cannot be started is a MaxTextEnvError (exit 4).
    """
    try:
        return tools.run(argv, env=env, cwd=workdir, timeout=timeout, log_dir=workdir, log_name=name)
    except ExternalToolError as e:
        raise MaxTextEnvError(str(e)) from None


# ----------------------------------------------------------------- validation


def topology_args(shape: SliceShape, slices: int) -> dict[str, str]:
    """What makes MaxText size the config for the plan's target instead of this CPU."""
    return {"compile_topology": compile_topology(shape), "compile_topology_num_slices": str(slices)}


def validate(cases: Sequence[tuple[str, Sequence[str], Mapping[str, str]]], venv: Path, workdir: Path, *, timeout: float = 600) -> dict[str, dict]:
    """Run MaxText's own config loader (and topology mesh) over ``(id, args, env)`` cases.

    One MaxText process for all cases (see driver.py). Returns id -> result with
    ``ok``, ``error`` (MaxText's message), ``num_target_devices``, ``num_slices``, ``mesh``.
    """
    import json

    workdir.mkdir(parents=True, exist_ok=True)
    cases_path = workdir / "cases.json"
    cases_path.write_text(json.dumps([{"id": i, "argv": list(a), "env": dict(e)} for i, a, e in cases]))
    # The driver's own process env: JAX on CPU; each case's env is applied around its check.
    env = local_env(())
    done = run([str(python(venv)), str(DRIVER), "validate", str(cases_path)], env, workdir, "validate", timeout=timeout)
    results: dict[str, dict] = {}
    for line in done.stdout_text().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            results[rec["id"]] = rec
    if done.returncode != 0 or done.timed_out:
        tail = " | ".join(done.stderr_text().strip().splitlines()[-3:])
        raise MaxTextEnvError(f"MaxText config validation process failed (exit {done.returncode}, timed out: {done.timed_out}): {tail}")
    return results


def describe_tokenizer(path: str, kind: str, venv: Path, workdir: Path, *, timeout: float = 300) -> dict:
    """Load a tokenizer with MaxText's own loader in its venv (driver.py ``tokenizer``).

    Returns ``ok``, ``error`` (MaxText's message when it does not load), ``vocab_size`` and
    ``sample_ids``. ``path`` is a file on this machine or a bundled name (assets/tokenizers/...).
    """
    import json

    workdir.mkdir(parents=True, exist_ok=True)
    done = run([str(python(venv)), str(DRIVER), "tokenizer", path, kind], local_env(()), workdir, "tokenizer", timeout=timeout)
    line = next((ln for ln in reversed(done.stdout_text().splitlines()) if ln.startswith("{")), None)
    if done.returncode != 0 or done.timed_out or line is None:
        tail = " | ".join(done.stderr_text().strip().splitlines()[-3:])
        raise MaxTextEnvError(f"MaxText's tokenizer loader did not answer (exit {done.returncode}, timed out: {done.timed_out}): {tail}")
    return json.loads(line)


def assets_root(venv: Path) -> Path:
    """MaxText's bundled assets in a pip-installed MaxText (its globals point into a repository checkout instead)."""
    found = sorted(venv.glob("lib/python3*/site-packages/maxtext/assets"))
    if not found:
        raise MaxTextEnvError(f"{venv} has no maxtext/assets (is it a MaxText {MAXTEXT_VERSION} venv?)")
    return found[-1]
