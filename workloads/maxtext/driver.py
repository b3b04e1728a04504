"""Runs INSIDE the MaxText venv (Python 3.12, maxtext 0.2.5), never in the toolkit's.

Standard library + maxtext only: the toolkit's packages are not installed there. The
toolkit starts it as ``<maxtext venv>/bin/python driver.py validate CASES.json``
(workloads/maxtext/env.py) and reads one JSON object per case from stdout.

``validate``: each case is ``{"id", "argv", "env"}`` where argv is the rendered MaxText
command's arguments (config file first). It goes through MaxText's own config loader
(``maxtext.configs.pyconfig.initialize``: base.yml + model preset + CLI + ``M_*`` env,
pydantic validation) and, when the args carry ``compile_topology``, MaxText's own mesh
construction for that topology (``train_compile.get_topology_mesh``), which is where a
mesh whose product does not match the devices fails. One process validates every case,
so MaxText's ~8 s import is paid once instead of once per recipe.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time


def _error_text(exc: BaseException) -> str:
    # pyconfig.initialize turns a config error into sys.exit(2) inside its except block;
    # the real error is then the SystemExit's implicit context.
    if isinstance(exc, SystemExit) and exc.__context__ is not None:
        exc = exc.__context__
    text = f"{type(exc).__name__}: {exc}"
    # pydantic errors carry a multi-line body; the "Value error, ..." line is the useful one.
    for line in str(exc).splitlines():
        s = line.strip()
        if s.startswith("Value error,"):
            return s.removeprefix("Value error,").split(" [type=")[0].strip()
    return " ".join(text.split())[:2000]


@contextlib.contextmanager
def _environ(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def validate(cases_path: str) -> int:
    t0 = time.monotonic()
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train_compile
    from maxtext.utils import maxtext_utils

    import_s = time.monotonic() - t0
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    for case in cases:
        t = time.monotonic()
        out = {"id": case["id"], "ok": False, "error": None}
        noise = io.StringIO()
        try:
            with _environ(case.get("env", {})), contextlib.redirect_stdout(noise):
                config = pyconfig.initialize(["train.py", *case["argv"]])
                out["num_target_devices"] = int(config.num_target_devices)
                out["num_slices"] = int(config.num_slices)
                if config.compile_topology:
                    train_compile.validate_config(config)
                    mesh = train_compile.get_topology_mesh(config)
                    out["mesh"] = {str(k): int(v) for k, v in mesh.shape.items() if int(v) != 1}
                # MaxText's own model-FLOPs formula: the figure behind TFLOP/s/device in its
                # step lines, so a preflight estimate and a run's MFU use the same yardstick.
                total, _, _ = maxtext_utils.calculate_tflops_training_per_device(config, log=False)
                out["model_tflop_per_device"] = float(total)
            out["ok"] = True
        except (Exception, SystemExit) as e:  # noqa: BLE001 — every failure is a verdict for this case
            out["error"] = _error_text(e)
        out["seconds"] = round(time.monotonic() - t, 2)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    sys.stdout.write(json.dumps({"id": "_import", "seconds": round(import_s, 2)}) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "validate":
        return validate(argv[1])
    sys.stderr.write("usage: driver.py validate CASES.json\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
