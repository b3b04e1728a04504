"""MaxText through Ray Train's JaxTrainer: what a ``--runtime ray`` RayJob runs on its head.

    python3 -m workloads.ray.jax_trainer --num-workers 4 --topology 4x4 \\
        --accelerator-type TPU-V6E --chips-per-worker 4 --run-name NAME \\
        [--env KEY=VALUE ...] -- CONFIG key=value ...

    python3 -m workloads.ray.jax_trainer --cpu --num-workers 1 -- CONFIG key=value ...

    python3 -m workloads.ray.jax_trainer ... --maxtext-args-b64=BASE64URL

Everything after ``--`` is MaxText's own command line, exactly what the JobSet runtime
passes to ``python3 -m maxtext.trainers.pre_train.train`` (the config file, then the
recipe's ``key=value`` arguments). A RayJob whose arguments are not all plain words
gives them as ``--maxtext-args-b64`` instead (``workloads.ray.entrypoint``: its
entrypoint passes through bash, ``ray job submit`` and ``sh`` before it gets here,
and only such words pass all three unchanged). The trainer starts ``--num-workers`` Ray Train
workers, one per TPU VM (hosts per slice x slices), and each runs MaxText's ``main``
with that command line: Ray's JAX backend calls ``jax.distributed.initialize`` on
every worker first (MaxText sees it initialized and does not do it again), and for
several slices it also sets the multislice coordinator variables.

``--cpu`` is the same wiring without TPUs: workers ask Ray for one CPU each and JAX
runs on the host platform. That is what the local test runs (tests/maxtext/
test_ray_trainer.py); what only a TPU exercises is listed in README.md (Ray on TPU).

Bad flags end with one line naming the flag and the fix, exit code 2, before Ray is
imported. Only the standard library, Ray, MaxText and ``workloads.ray.entrypoint``
are used, so the ``workloads/ray`` package can be copied into any image that has
those two (Ray Train's JaxTrainer is alpha in Ray).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from workloads.ray import entrypoint

TRAIN_MODULE = "maxtext.trainers.pre_train.train"
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")
_ACCELERATOR = re.compile(r"^TPU-V[0-9A-Z]+$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UsageError(Exception):
    """A bad flag: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own: usage block + message; here one line
        raise UsageError(f"{message} (see --help)")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The entrypoint's flags; MaxText's command line is everything after ``--``."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        ours, maxtext = argv[:cut], argv[cut + 1 :]
    else:
        ours, maxtext = argv, []
    p = _Parser(prog="python3 -m workloads.ray.jax_trainer")
    p.add_argument("--num-workers", type=int, required=True, help="Ray Train workers: one per TPU VM, hosts per slice x slices")
    p.add_argument("--topology", help="TPU topology of one slice, e.g. 4x4 (required with TPUs)")
    p.add_argument("--accelerator-type", help="Ray accelerator type, e.g. TPU-V6E (required with TPUs)")
    p.add_argument("--chips-per-worker", type=int, default=None, help="TPU chips each worker holds (chips per VM)")
    p.add_argument("--cpu", action="store_true", help="no TPUs: one CPU per worker, JAX on the host platform")
    p.add_argument("--run-name", default="maxtext-jaxtrainer", help="Ray Train run name")
    p.add_argument("--storage-path", default=None, help="Ray Train storage path (default: Ray's)")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join (default: RAY_ADDRESS, else a local one)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="env var for every worker (repeatable)")
    p.add_argument("--train-module", default=TRAIN_MODULE, help="MaxText module whose main(argv) trains")
    p.add_argument(entrypoint.ARGS_FLAG, dest="maxtext_args_b64", metavar="BASE64URL", help="MaxText's command line as one word (instead of `-- ...`)")
    args = p.parse_args(ours)
    if args.maxtext_args_b64 is not None:
        if maxtext:
            raise UsageError(f"{entrypoint.ARGS_FLAG} and `-- ...` both give MaxText's command line: keep one")
        try:
            maxtext = entrypoint.decode_args(args.maxtext_args_b64)
        except ValueError as e:
            raise UsageError(str(e)) from None
    args.maxtext_args = maxtext
    check(args)
    return args


def check(args: argparse.Namespace) -> None:
    """Everything Ray would otherwise reject late (or not at all), as one line each."""
    if not args.maxtext_args:
        raise UsageError("no MaxText command line: add `-- CONFIG key=value ...` after the flags (the config file first)")
    if "=" in args.maxtext_args[0]:
        raise UsageError(f"MaxText's command line must start with its config file, not {args.maxtext_args[0]!r}: put CONFIG right after `--`")
    if args.num_workers < 1:
        raise UsageError(f"--num-workers {args.num_workers}: must be at least 1 (one worker per TPU VM)")
    for item in args.env:
        key, eq, _ = item.partition("=")
        if not eq or not _ENV_KEY.fullmatch(key):
            raise UsageError(f"--env {item!r}: write it as KEY=VALUE with KEY a valid variable name")
    if args.cpu:
        for flag, value in (("--topology", args.topology), ("--accelerator-type", args.accelerator_type), ("--chips-per-worker", args.chips_per_worker)):
            if value is not None:
                raise UsageError(f"{flag} is a TPU setting and --cpu runs without TPUs: drop one of them")
        return
    if not args.topology or not _TOPOLOGY.fullmatch(args.topology):
        raise UsageError(f"--topology {args.topology or '(missing)'}: give the slice topology, e.g. 4x4 or 2x2x4 (or --cpu for no TPUs)")
    if not args.accelerator_type or not _ACCELERATOR.fullmatch(args.accelerator_type):
        raise UsageError(f"--accelerator-type {args.accelerator_type or '(missing)'}: give Ray's TPU type, e.g. TPU-V6E or TPU-V5LITEPOD")
    if args.chips_per_worker is not None and args.chips_per_worker < 1:
        raise UsageError(f"--chips-per-worker {args.chips_per_worker}: must be at least 1 (the chips of one TPU VM)")


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    """Env vars of every Ray Train worker (the run's own, from --env)."""
    env = dict(item.split("=", 1) for item in args.env)
    if args.cpu:
        # A TPU image's recipe env says tpu,cpu; without a TPU that fails JAX's backend init.
        env["JAX_PLATFORMS"] = "cpu"
    return env


def scaling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """ScalingConfig's arguments: one worker per TPU VM, spread over the VMs of the slices."""
    if args.cpu:
        return {"num_workers": args.num_workers, "use_tpu": False, "resources_per_worker": {"CPU": 1}}
    out: dict[str, Any] = {
        "num_workers": args.num_workers,
        "use_tpu": True,
        "topology": args.topology,
        "accelerator_type": args.accelerator_type,
        "placement_strategy": "SPREAD",
    }
    if args.chips_per_worker is not None:
        out["resources_per_worker"] = {"TPU": args.chips_per_worker}
    return out


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: MaxText's main with the run's command line (argv[0] is the program)."""
    import importlib

    module = importlib.import_module(config["train_module"])
    module.main([config["train_module"], *config["maxtext_args"]])


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # JaxTrainer is a Train V2 trainer
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    t0 = time.monotonic()
    address = args.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:
        # No cluster to join (a local run): a private one (never another user's), sized for the workers plus the controller.
        ray.init(address="local", num_cpus=args.num_workers + 1, include_dashboard=False)
    env = worker_env(args)
    run_kwargs: dict[str, Any] = {"name": args.run_name, "worker_runtime_env": {"env_vars": env}}
    if args.storage_path:
        run_kwargs["storage_path"] = args.storage_path
    trainer = JaxTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={"train_module": args.train_module, "maxtext_args": list(args.maxtext_args)},
        scaling_config=ScalingConfig(**scaling_kwargs(args)),
        run_config=RunConfig(**run_kwargs),
    )
    try:
        result = trainer.fit()
    finally:
        ray.shutdown()
    return {
        "run_name": args.run_name,
        "workers": args.num_workers,
        "use_tpu": not args.cpu,
        "error": None if result.error is None else str(result.error).splitlines()[0],
        "seconds": round(time.monotonic() - t0, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    summary = run(args)
    # One line a caller can parse, after Ray's own output.
    sys.stdout.write("tgk-jaxtrainer " + json.dumps(summary) + "\n")
    return 0 if summary["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
