"""A Hugging Face checkpoint converted to MaxText's format: what ``convert`` runs, where it reads and writes. Pure.

``convert RECIPE --from gs://BUCKET/PATH`` runs MaxText's own conversion
(``maxtext.checkpoint_conversion.to_maxtext``, in the pinned MaxText image) for the recipe's
model, as a Kubernetes Job on the spec's CPU pool (``workloads.render.convert_job``):

- it reads the Hugging Face files (``config.json``, ``*.safetensors``) from the bucket
  through a read-only GCS FUSE mount of their prefix at ``HF_MOUNT`` (MaxText's
  ``hf_model_path`` takes a local directory or a hub id, not a bucket);
- it writes the MaxText checkpoint straight to the team's checkpoints bucket, under
  ``<bucket>/_base/<name>/`` (``BASE_PREFIX``): MaxText saves it as step 0, so the
  parameters are ``<bucket>/_base/<name>/0/items`` — what ``submit --load-parameters``
  takes. ``_base`` can never be a run's directory (a run name is a DNS label: no ``_``),
  and ``cleanup`` deletes only a run's ``<run>/checkpoints/`` with its identity beside it,
  so a converted base checkpoint is never cleaned up (``workloads.runs.base_checkpoints``
  records it);
- MaxText's defaults for a conversion, kept: lazy loading (one tensor at a time from the
  safetensors shards, read with numpy: no torch in the image is needed), 16 simulated CPU
  devices sharding the saved arrays (fewer than 2 fails MaxText 0.2.5's save: its Orbax
  handler does not take a single-device TrainState), bf16 weights.

The model families MaxText converts are the table ``_maxtext_conversions.yaml`` (generated
from the pinned wheel by scripts/gen_maxtext_conversions.py); any other recipe is refused
here. ``--set`` passes MaxText keys to the conversion as to a run (``scan_layers`` must be
what the runs that load it use; dimensions of a preset need ``override_model_config=true``).

Memory: MaxText's save holds every converted array at once (its sharded TrainState), in the
saved dtype, plus the tensor being converted: the Job requests the model's bf16 bytes x
``MEMORY_HEADROOM`` plus ``MEMORY_BASE_GIB`` for Python and JAX (the tiny model converts at
0.6 GB peak here). That request must fit the CPU pool's machine after GKE's reservations
(``node_allocatable_gib``); a pool too small is refused with the machine that would do.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from infra.spec import EnvSpec
from infra.spec.storage import BucketPurpose
from toolkit.errors import FieldError
from toolkit.names import DNS1035_LABEL
from toolkit.yamlfile import load_yaml, read_capped
from workloads.planning.errors import PlanError
from workloads.planning.maxtext_keys import MODEL_KEYS
from workloads.planning.maxtext_sets import arg_text, parse_sets, read_sets
from workloads.planning.recipe_model import Kind, Recipe
from workloads.planning.recipes import load_recipe
from workloads.planning.target import image_ref

CONVERSIONS_FILE = Path(__file__).resolve().parent.parent / "recipes" / "_maxtext_conversions.yaml"
CONVERT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"
BASE_PREFIX = "_base"
HF_MOUNT = "/hf"
SIMULATED_DEVICES = 16  # MaxText's default; at least 2 (see the module docstring)
BYTES_PER_PARAM = 2  # bf16, the conversion's save_dtype
MEMORY_HEADROOM = 1.25
MEMORY_BASE_GIB = 2
CPU_REQUEST = "2"
_GCS = re.compile(r"^gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])/([A-Za-z0-9._=+-]+(?:/[A-Za-z0-9._=+-]+)*)/?$")
_MACHINE = re.compile(r"^([a-z][a-z0-9]*)-(standard|highmem|highcpu)-([0-9]+)$")
GIB = 2**30
_HIGHCPU_2 = frozenset({"c2d", "c3", "c3d", "c4", "c4a", "c4d", "n4"})  # their highcpu types have 2 GiB per vCPU


@cache
def conversions() -> dict[str, str]:
    """model_name -> the Hugging Face repository MaxText names for it, for every model its conversion handles."""
    return dict(load_yaml(read_capped(CONVERSIONS_FILE))["models"])


@dataclass(frozen=True)
class Conversion:
    name: str  # the converted checkpoint's directory name under _base/
    recipe: str
    model_name: str
    hf_repo: str  # the Hugging Face repository MaxText names for the model (the source should hold its files)
    source_bucket: str
    source_prefix: str
    bucket: str  # the team's checkpoints bucket
    team: str
    namespace: str
    service_account: str
    cpu_pool: str
    image: str
    args: tuple[str, ...]  # MaxText's conversion arguments (config first)
    scan_layers: bool
    params: int
    memory_gib: int
    run_as_user: int | None = None

    @property
    def source(self) -> str:
        return f"gs://{self.source_bucket}/{self.source_prefix}/"

    @property
    def directory(self) -> str:
        """Where MaxText writes it (its base_output_directory), ending in '/'."""
        return f"gs://{self.bucket}/{BASE_PREFIX}/{self.name}/"

    @property
    def checkpoint(self) -> str:
        """What ``submit --load-parameters`` takes: the step-0 items MaxText saves."""
        return f"{self.directory}0/items"

    @property
    def job_name(self) -> str:
        return f"convert-{self.name}"

    def summary(self) -> dict[str, object]:
        return {
            "name": self.name,
            "recipe": self.recipe,
            "model_name": self.model_name,
            "hugging_face_repository": self.hf_repo,
            "source": self.source,
            "directory": self.directory,
            "checkpoint": self.checkpoint,
            "team": self.team,
            "namespace": self.namespace,
            "job": self.job_name,
            "cpu_pool": self.cpu_pool,
            "memory_gib": self.memory_gib,
            "scan_layers": self.scan_layers,
            "params": self.params,
        }


def node_allocatable_gib(machine_type: str) -> float | None:
    """Memory a pod may request on a GKE node of ``machine_type`` (None: a type whose memory this does not know).

    The machine's memory (GiB per vCPU of its variant: standard 4, highmem 8, highcpu 1 — 2 on
    the C2D, C3, C3D, C4, C4A, C4D and N4 series; N1's 3.75, 6.5 and 0.9) less GKE's reservation for the kubelet and system (25% of the first
    4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128) and the
    100 MiB eviction threshold (GKE's "cluster architecture: node allocatable resources").
    """
    m = _MACHINE.fullmatch(machine_type)
    if m is None:
        return None
    series, variant, cpus = m.group(1), m.group(2), int(m.group(3))
    per_cpu = {"standard": 4, "highmem": 8, "highcpu": 2 if series in _HIGHCPU_2 else 1}[variant]
    if series == "n1":
        per_cpu = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}[variant]
    total = left = cpus * per_cpu
    reserved = 0.0
    for size, share in ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (math.inf, 0.02)):
        part = min(left, size)
        reserved += part * share
        left -= part
        if left <= 0:
            break
    return total - reserved - 100 / 1024


def _source(text: str) -> tuple[str, str]:
    m = _GCS.fullmatch(text)
    if m is None:
        raise FieldError(
            "--from",
            f"{text[:200]!r} is not gs://BUCKET/PATH",
            "pass the bucket prefix holding the Hugging Face files (config.json, *.safetensors), e.g. gs://my-hf/meta-llama/Llama-3.1-8B",
        )
    return m.group(1), m.group(2)


def _model_name(recipe: Recipe) -> str:
    if recipe.kind is Kind.COMMAND or recipe.maxtext is None:
        raise FieldError("RECIPE", f"recipe {recipe.name} runs a plain command, not a MaxText model", "pick a MaxText recipe (python -m workloads recipes)")
    name = recipe.maxtext.model_name
    table = conversions()
    if name not in table:
        why = "a model of the recipe's own dimensions, which no Hugging Face checkpoint has" if name == "default" else "not one MaxText 0.2.5 converts"
        from workloads.planning.recipes import listable_recipes

        ok = [r.name for r in listable_recipes()[0] if r.maxtext is not None and r.maxtext.model_name in table]
        raise FieldError(
            "RECIPE",
            f"recipe {recipe.name}'s model {name} is {why}",
            f"convert a recipe whose model MaxText converts ({', '.join(ok) or 'none yet'}; every such model: workloads/recipes/_maxtext_conversions.yaml)",
        )
    return name


def plan_conversion(
    recipe_name: str,
    spec: EnvSpec,
    *,
    source: str | None,
    name: str,
    team: str | None = None,
    sets: tuple[str, ...] = (),
    image: str | None = None,
) -> Conversion:
    """The conversion ``convert`` runs; one FieldError naming the argument or flag for what cannot be, before anything is applied.

    ``source``: the Hugging Face files' gs:// prefix; None for a conversion on this machine (``convert --local``).
    """
    recipe = load_recipe(recipe_name)
    model_name = _model_name(recipe)
    mt = recipe.maxtext
    assert mt is not None
    bucket, prefix = _source(source) if source is not None else ("", "")
    if not re.fullmatch(DNS1035_LABEL, name) or len(name) > 40:
        raise FieldError("--name", f"{name[:60]!r} is not a name of lowercase letters, digits and '-' (at most 40)", "pass e.g. --name llama31-8b-base")
    t = spec.team(team)
    ckpt = spec.bucket_for(BucketPurpose.CHECKPOINTS, t)
    if ckpt is None:
        raise FieldError("--team", f"team {t.name} has no bucket with purpose: checkpoints in the spec", "add one: the converted checkpoint is written there")
    img = image_ref(recipe, spec, image, "jobset")
    try:
        parsed = read_sets(recipe, mt, parse_sets(sets), img)
    except PlanError as e:
        raise FieldError(e.field, e.problem, e.fix) from None
    text = dict(parsed.text)
    dims = mt.model.model_copy(update={k: v for k, v in parsed.ints.items() if k in MODEL_KEYS})
    args = {k: arg_text(v) for k, v in mt.args.items() if k == "scan_layers"}
    args.update({k: v for k, v in text.items() if k == "scan_layers"})
    scan = args.get("scan_layers", "true").lower() in ("true", "1")
    conv_args = {
        "model_name": model_name,
        "base_output_directory": f"gs://{ckpt.name}/{BASE_PREFIX}/{name}",
        "hf_model_path": HF_MOUNT,
        "scan_layers": "true" if scan else "false",
        "hardware": "cpu",
        "skip_jax_distributed_system": "true",
        "lazy_load_tensors": "true",
        "simulated_cpu_devices_count": str(SIMULATED_DEVICES),
        "jax_cache_dir": "",
    }
    for k, v in text.items():
        if k in ("model_name", "base_output_directory", "hf_model_path"):
            raise FieldError(
                "--set", f"{k} is set by convert", {"model_name": "pick the recipe", "base_output_directory": "use --team and --name"}.get(k, "use --from")
            )
        conv_args[k] = v
    params = dims.params()
    memory = math.ceil(params * BYTES_PER_PARAM * MEMORY_HEADROOM / GIB) + MEMORY_BASE_GIB
    room = node_allocatable_gib(spec.cpu_pool.machine_type)
    if room is not None and memory > room:
        raise FieldError(
            "cpu_pool.machine_type",
            f"converting {model_name} ({params / 1e9:.1f}B parameters) needs ~{memory} GiB of memory; a {spec.cpu_pool.machine_type} node gives a pod {room:.0f} GiB",
            f"use a CPU pool machine with more memory (a highmem type of {_cpus_for(memory)} vCPUs or more)",
        )
    return Conversion(
        name=name,
        recipe=recipe.name,
        model_name=model_name,
        hf_repo=conversions()[model_name],
        source_bucket=bucket,
        source_prefix=prefix,
        bucket=ckpt.name,
        team=t.name,
        namespace=t.ns,
        service_account=t.ksa,
        cpu_pool=spec.cpu_pool.name,
        image=img,
        args=(mt.config, *(f"{k}={v}" for k, v in conv_args.items())),
        scan_layers=scan,
        params=params,
        memory_gib=memory,
        run_as_user=t.pod_user,
    )


def _cpus_for(gib: int) -> int:
    """The smallest power-of-two vCPU count whose highmem machine gives a pod ``gib``."""
    cpus = 2
    while (node_allocatable_gib(f"n2-highmem-{cpus}") or 0) < gib and cpus < 1024:
        cpus *= 2
    return cpus
