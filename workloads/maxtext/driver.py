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


def tokenizer(path: str, kind: str) -> int:
    """Load a tokenizer with MaxText's own loader (what the run's input pipeline calls) and describe it.

    Prints one JSON object: ``ok``, ``error``, ``vocab_size`` (the size of the id space, so a
    model whose vocab_size is smaller can be refused), ``sample_ids`` (a short text encoded).
    """
    out: dict = {"ok": False, "error": "", "vocab_size": None, "sample_ids": []}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import maxtext
            from maxtext.input_pipeline import tokenizer as tk
            from maxtext.utils.globals import MAXTEXT_ASSETS_ROOT

            # MaxText's config resolves a bundled name (assets/tokenizers/x) by its basename under its
            # assets root: the repository's in the image, the package's own in a pip install.
            if not os.path.exists(path) and not path.startswith("gs://"):
                roots = (MAXTEXT_ASSETS_ROOT, os.path.join(os.path.dirname(maxtext.__file__), "assets"))
                path = next((c for c in (os.path.join(r, "tokenizers", os.path.basename(path)) for r in roots) if os.path.exists(c)), path)
            t = tk.build_tokenizer(path, kind, True, False, "")
            ids = [int(i) for i in t.encode("The quick brown fox jumps over the lazy dog.")]
        model = getattr(t, "_tokenizer_model", None) or getattr(t, "tokenizer", None) or getattr(t, "model", None)
        size = None
        for attr in ("get_piece_size", "n_vocab", "__len__"):
            v = getattr(model, attr, None)
            if v is not None:
                size = int(v() if callable(v) else v)
                break
        out.update(ok=True, vocab_size=size, sample_ids=ids[:32])
    except BaseException as e:  # noqa: BLE001  a tokenizer that does not load is the answer, whatever raised
        out["error"] = _error_text(e)
    print(json.dumps(out), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "validate":
        return validate(argv[1])
    if len(argv) == 3 and argv[0] == "tokenizer":
        return tokenizer(argv[1], argv[2])
    sys.stderr.write("usage: driver.py validate CASES.json | driver.py tokenizer PATH TYPE\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
