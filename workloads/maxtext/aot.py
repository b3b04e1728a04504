"""Ahead-of-time compile of a RunPlan's MaxText step for its TPU topology, and a verdict.

Runs MaxText's own ``train_compile`` (``python -m maxtext.trainers.pre_train.train_compile``)
in the MaxText venv with the plan's args and env — what the JobSet runs — plus
``compile_topology``/``compile_topology_num_slices`` from the plan and the local
substitutions documented in ``workloads.maxtext.env``. XLA compiles the real training
step for the target (e.g. v5e-16 x 2 slices) on this CPU; nothing runs on a TPU.

What MaxText prints on success, and what is read from it:

    Finished train_compile.py successfully!
    Cost analysis: {..., 'flops': 35243469832192.0, ...}          # per device, one step
    Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=..., argument_size_in_bytes=...,
        output_size_in_bytes=..., alias_size_in_bytes=..., temp_size_in_bytes=..., ...)

Per-device peak = arguments + outputs - aliased (outputs donated into their inputs: the
train state) + temporaries + generated code; compared with the catalog's HBM per device.
When XLA itself cannot place the program in HBM, the compile fails with
``RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom`` naming the buffers (e.g. HLO
temporaries), the bytes they need and the usable HBM; that becomes the "does not fit"
verdict, one line instead of a stack trace.

Exit codes of ``preflight --compile``: 0 fits; 1 does not fit; 2 bad input (including a
config MaxText rejects); 4 the compile failed for another reason (see the kept log).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infra.catalog import GIB
from toolkit.errors import ToolkitError
from workloads.maxtext import env as maxtext_env
from workloads.planning.model import RunPlan

FINISHED = "Finished train_compile.py successfully!"
EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT, EXIT_COMPILE_FAILED = 0, 1, 2, 4

_MEM = re.compile(r"Memory analysis: CompiledMemoryStats\((?P<body>[^)]*)\)")
_FIELD = re.compile(r"(\w+)_in_bytes=(\d+)", re.ASCII)
_FLOPS = re.compile(r"'flops': ([0-9.eE+-]+)")
# XLA's compile-time HBM OOM (MaxText 0.2.5 / libtpu 0.0.52), one line:
#   JaxRuntimeError: RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total
#   memory required for HLO temporaries (65.13G) exceeds available HBM (15.75G). HLO module: jit_train_step.
# Sizes carry K/M/G/T suffixes (powers of 1024).
_OOM = re.compile(
    r"memory required for (?P<what>[A-Za-z][\w ]*?) \((?P<need>[0-9.]+)(?P<nu>[KMGT]?)\) exceeds available HBM \((?P<avail>[0-9.]+)(?P<au>[KMGT]?)\)", re.ASCII
)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class CompileFailed(ToolkitError):
    """train_compile failed for a reason other than memory."""

    exit_code = EXIT_COMPILE_FAILED


class MaxTextRejected(ToolkitError):
    """MaxText's config validation refused the rendered args (bad input: exit 2)."""


def _bytes(num: str, unit: str) -> int:
    return int(float(num) * _UNITS[unit.upper()])


@dataclass(frozen=True)
class MemoryStats:
    """XLA's compiled memory analysis for one device, in bytes."""

    arguments: int
    outputs: int
    aliased: int
    temporaries: int
    generated_code: int

    @property
    def total(self) -> int:
        return self.arguments + self.outputs - self.aliased + self.temporaries + self.generated_code


@dataclass(frozen=True)
class Oom:
    """What XLA said when the step did not fit HBM."""

    buffers: str | None  # which buffers XLA could not place, e.g. "HLO temporaries"
    needed_bytes: int | None
    available_bytes: int | None  # HBM XLA can use (the catalog figure minus what the runtime reserves)
    message: str


@dataclass(frozen=True)
class AotResult:
    recipe: str
    compile_topology: str
    slices: int
    devices: int
    per_device_batch_size: float | None
    remat_policy: str | None
    hbm_bytes_per_device: int
    fits: bool
    compiled: bool
    memory: MemoryStats | None
    flops_per_device: float | None  # XLA cost analysis of the compiled step (see render_text)
    model_tflop_per_device: float | None  # MaxText's analytic estimate for one step
    oom: Oom | None
    compile_seconds: float
    peak_rss_bytes: int
    argv: tuple[str, ...]
    env: dict[str, str]
    log_dir: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_FITS if self.fits else EXIT_DOES_NOT_FIT

    def advice(self) -> list[str]:
        """What to change when it does not fit (or fits with little room)."""
        if self.fits:
            return []
        tips = []
        if self.per_device_batch_size and self.per_device_batch_size > 1:
            tips.append(f"lower per_device_batch_size (now {self.per_device_batch_size:g}): activations and logits scale with it")
        if self.remat_policy and self.remat_policy != "full":
            tips.append(f"remat_policy=full (now {self.remat_policy}): recompute activations in the backward pass instead of keeping them")
        tips.append("shard the state over more devices: more fsdp (a bigger slice, or dcn_fsdp_parallelism across slices instead of data)")
        return tips

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        gib = lambda b: None if b is None else round(b / GIB, 3)  # noqa: E731
        if self.memory:
            d["memory_gib"] = {
                "arguments": gib(self.memory.arguments),
                "outputs": gib(self.memory.outputs),
                "aliased": gib(self.memory.aliased),
                "temporaries": gib(self.memory.temporaries),
                "generated_code": gib(self.memory.generated_code),
                "total": gib(self.memory.total),
            }
        d["hbm_gib_per_device"] = gib(self.hbm_bytes_per_device)
        d["model_tflop_per_step_per_device"] = None if self.model_tflop_per_device is None else round(self.model_tflop_per_device, 3)
        d["xla_tflop_per_step_per_device"] = None if self.flops_per_device is None else round(self.flops_per_device / 1e12, 3)
        d["verdict"] = "fits" if self.fits else "does not fit"
        d["advice"] = self.advice()
        d["exit_code"] = self.exit_code
        return d


# ----------------------------------------------------------------- parsing


def parse_memory(stdout: str) -> MemoryStats | None:
    m = _MEM.search(stdout)
    if not m:
        return None
    f = {k: int(v) for k, v in _FIELD.findall(m.group("body"))}
    try:
        return MemoryStats(
            arguments=f["argument_size"],
            outputs=f["output_size"],
            aliased=f["alias_size"],
            temporaries=f["temp_size"],
            generated_code=f.get("generated_code_size", 0),
        )
    except KeyError:
        return None


def parse_flops(stdout: str) -> float | None:
    line = next((ln for ln in stdout.splitlines() if ln.startswith("Cost analysis:")), "")
    m = _FLOPS.search(line)
    return float(m.group(1)) if m else None


def parse_oom(text: str) -> Oom | None:
    """XLA's compile-time HBM out-of-memory error, if the compile failed with one."""
    line = next((ln.strip() for ln in text.splitlines() if "CompileTimeHbmOom" in ln or ("RESOURCE_EXHAUSTED" in ln and "HBM" in ln.upper())), None)
    if line is None:
        return None
    m = _OOM.search(line)
    return Oom(
        buffers=m.group("what") if m else None,
        needed_bytes=_bytes(m.group("need"), m.group("nu")) if m else None,
        available_bytes=_bytes(m.group("avail"), m.group("au")) if m else None,
        message=line.split("RESOURCE_EXHAUSTED: ", 1)[-1][:500],
    )


def _arg(args: tuple[str, ...], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")), None)


# ----------------------------------------------------------------- compile


def command(plan: RunPlan, venv: Path, workdir: Path) -> tuple[list[str], dict[str, str]]:
    program, target = plan.program, plan.target
    if not program.is_maxtext:
        raise ToolkitError(f"recipe {program.recipe} runs a plain command, not MaxText — there is nothing to compile ahead of time")
    args = maxtext_env.local_args(program.args, workdir, maxtext_env.topology_args(target.shape, target.slices))
    argv = [str(maxtext_env.python(venv)), "-m", maxtext_env.TRAIN_COMPILE_MODULE, *args]
    return argv, maxtext_env.local_env(program.env)


KEPT_LOGS = ("train_compile.stdout", "train_compile.stderr")  # what --keep-logs keeps


def check(plan: RunPlan, *, keep_logs: Path | None = None) -> None:
    """What would make a compile pointless, refused before its minutes: a plan that runs no MaxText,
    a ``keep_logs`` directory that is not one, or holds a file of the user's under a log's name."""
    from toolkit import owned
    from toolkit.clikit import check_out_dir
    from toolkit.errors import SpecError

    if not plan.program.is_maxtext:
        raise SpecError("RECIPE", f"recipe {plan.program.recipe} runs a plain command, not MaxText; there is nothing to compile", "pick a MaxText recipe")
    if keep_logs is not None:
        check_out_dir(keep_logs, "--keep-logs")
        if keep_logs.is_dir():
            owned.check_update(keep_logs, dict.fromkeys(KEPT_LOGS, b""), "--keep-logs")


def compile_plan(plan: RunPlan, venv: Path, *, timeout: float = 1800, keep_log_dir: Path | None = None) -> AotResult:
    """Compile ``plan`` for its topology; a fits/does-not-fit result against the HBM per
    device of the plan's slice shape (the catalog's figure), or an error."""
    program, target = plan.program, plan.target
    hbm_bytes_per_device = target.shape.hbm_bytes_per_device
    workdir = Path(tempfile.mkdtemp(prefix="tgk-aot-"))
    try:
        argv, env = command(plan, venv, workdir)
        # MaxText's config check first (~20 s, one process): a rejected config fails fast with
        # MaxText's own message, and it yields MaxText's model-FLOPs estimate for the table.
        case_env = {k: v for k, v in env.items() if k not in maxtext_env.INHERITED_ENV}  # what the compile gets
        checked = maxtext_env.validate([("plan", argv[3:], case_env)], venv, workdir / "validate")["plan"]
        if not checked["ok"]:
            raise MaxTextRejected(f"MaxText rejects the rendered command: {checked['error']}")
        done = maxtext_env.run(argv, env, workdir, "train_compile", timeout=timeout)
        stdout, stderr = done.stdout_text(), done.stderr_text()
        log_dir = None
        if keep_log_dir is not None:
            from toolkit import owned

            # Replacing only logs an earlier compile kept there (toolkit.owned); a file of the user's is refused.
            logs = {name: getattr(done, f"{name.rsplit('.', 1)[1]}_path").read_bytes() for name in KEPT_LOGS}
            root = owned.check_root(keep_log_dir, "--keep-logs")
            owned.write_files(root, logs, "--keep-logs")
            log_dir = str(keep_log_dir)
        common = dict(
            recipe=program.recipe,
            compile_topology=maxtext_env.compile_topology(target.shape),
            slices=target.slices,
            devices=target.devices,
            per_device_batch_size=program.sizing.per_device_batch_size if program.sizing else None,
            remat_policy=_arg(program.args, "remat_policy"),
            hbm_bytes_per_device=hbm_bytes_per_device,
            compile_seconds=round(done.seconds, 1),
            peak_rss_bytes=done.peak_rss_bytes,
            argv=tuple(argv),
            env={k: v for k, v in env.items() if k not in maxtext_env.INHERITED_ENV},
            log_dir=log_dir,
            model_tflop_per_device=checked.get("model_tflop_per_device"),
        )
        if done.timed_out:
            raise CompileFailed(f"train_compile did not finish in {timeout:g} s" + (f" — logs in {log_dir}" if log_dir else ""))
        if done.returncode == 0 and FINISHED in stdout:
            mem = parse_memory(stdout)
            if mem is None:
                raise CompileFailed("train_compile finished but printed no memory analysis; MaxText's output format changed?")
            return AotResult(fits=mem.total <= hbm_bytes_per_device, compiled=True, memory=mem, flops_per_device=parse_flops(stdout), oom=None, **common)
        oom = parse_oom(stderr + "\n" + stdout)
        if oom is not None:
            return AotResult(fits=False, compiled=False, memory=None, flops_per_device=None, oom=oom, **common)
        from workloads.maxtext.run_local import last_error

        why = last_error(stderr)
        where = f" — full log: {log_dir}" if log_dir else " (pass --keep-logs DIR for the full log)"
        if "MAXTEXT CONFIG ERROR" in why:
            raise MaxTextRejected(f"MaxText rejects the rendered command: {why.removeprefix('MAXTEXT CONFIG ERROR: ')}{where}")
        raise CompileFailed(f"train_compile failed (exit {done.returncode}): {why}{where}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ----------------------------------------------------------------- text


def render_text(r: AotResult) -> list[str]:
    gib = lambda b: f"{b / GIB:7.2f} GiB"  # noqa: E731
    out = [
        f"preflight --compile: {r.recipe} on {r.compile_topology} x {r.slices} slice(s) ({r.devices} devices), "
        f"per_device_batch_size={r.per_device_batch_size:g}, remat_policy={r.remat_policy or 'default'}"
        if r.per_device_batch_size is not None
        else f"preflight --compile: {r.recipe} on {r.compile_topology} x {r.slices} slice(s)",
    ]
    if r.memory:
        m = r.memory
        out += [
            f"  {'per device':<22}{'compiled':>12}",
            f"  {'arguments':<22}{gib(m.arguments):>12}",
            f"  {'outputs':<22}{gib(m.outputs):>12}",
            f"  {'  aliased (donated)':<22}{gib(-m.aliased):>12}",
            f"  {'temporaries':<22}{gib(m.temporaries):>12}",
            f"  {'generated code':<22}{gib(m.generated_code):>12}",
            f"  {'total':<22}{gib(m.total):>12}   of {r.hbm_bytes_per_device / GIB:g} GiB HBM ({100 * m.total / r.hbm_bytes_per_device:.0f}%)",
        ]
    elif r.oom:
        o = r.oom
        if o.needed_bytes is not None and o.available_bytes is not None:
            out.append(
                f"  {o.buffers or 'needed':<22}{gib(o.needed_bytes):>12}   > {o.available_bytes / GIB:.2f} GiB usable HBM (catalog: {r.hbm_bytes_per_device / GIB:g} GiB per device)"
            )
        else:
            out.append(f"  XLA: {o.message}")
    if r.model_tflop_per_device is not None:
        out.append(f"  {'step cost (model)':<22}{r.model_tflop_per_device:9.1f} TFLOP per device (MaxText's estimate, as in its TFLOP/s)")
    if r.flops_per_device is not None:
        # XLA's cost analysis does not multiply a while loop's body by its trip count, so with
        # scan_layers (MaxText's default) it is far below the model figure; shown because it is
        # what the compiled program itself reports.
        out.append(f"  {'step cost (XLA)':<22}{r.flops_per_device / 1e12:9.1f} TFLOP per device (cost analysis; a scanned layer loop counts once)")
    out.append(f"  {'compile':<22}{r.compile_seconds:9.1f} s, peak RSS {r.peak_rss_bytes / GIB:.2f} GiB")
    if r.fits:
        assert r.memory is not None
        out.append(f"fits: {r.memory.total / GIB:.2f} GiB of {r.hbm_bytes_per_device / GIB:g} GiB per device")
    else:
        if r.memory:
            what = f"{r.memory.total / GIB:.2f} GiB compiled > {r.hbm_bytes_per_device / GIB:g} GiB per device"
        elif r.oom and r.oom.needed_bytes is not None and r.oom.available_bytes is not None:
            what = (
                f"CompileTimeHbmOom, {r.oom.buffers or 'the step'} alone need {r.oom.needed_bytes / GIB:.2f} GiB "
                f"of {r.oom.available_bytes / GIB:.2f} GiB usable HBM per device"
            )
        else:
            what = "XLA ran out of HBM at compile time (CompileTimeHbmOom)"
        out.append(f"does not fit: {what}; try: " + "; or ".join(r.advice()))
    return out
