"""Recipes: what to run, as data files validated into typed models.

A recipe is ``workloads/recipes/<name>.yaml``. It names the image, the program
(MaxText with a model and its arguments, or a plain command), XLA/libtpu flags,
default steps, the TPU shapes it was sized for, and *rules* instead of numbers
where the right number depends on the target: the per-device batch by HBM per
device, and the mesh by devices per slice and slices. ``workloads.planning.planner`` turns a
recipe plus a target into concrete numbers and checks them.

Unknown keys are errors, as in the environment spec.
"""

from __future__ import annotations

import difflib
import math
import re
from enum import Enum
from functools import cache, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infra.catalog import GENERATIONS
from toolkit.errors import ToolkitError
from toolkit.yamlfile import YamlFileError, load_yaml, read_capped
from workloads.planning import carry
from workloads.planning.defaults import INT32_MAX
from workloads.planning.model import RUNTIMES
from workloads.ray import RAY_VERSION

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
MAXTEXT_KEYS_FILE = RECIPES_DIR / "_maxtext_keys.yaml"
MAXTEXT_NUMBERS_FILE = RECIPES_DIR / "_maxtext_numbers.yaml"  # the keys whose default is a number

# MaxText 0.2.5's mesh axes, in base.yml order. Every one of them exists both as
# ici_<axis>_parallelism (inside a slice) and dcn_<axis>_parallelism (across slices).
MESH_AXES: tuple[str, ...] = (
    "diloco",
    "data",
    "fsdp",
    "fsdp_transpose",
    "sequence",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "autoregressive",
    "pipeline",
    "expert",
)
FILL = -1  # "all the devices the other axes leave", as in MaxText's base.yml
# A MaxText integer as a script or --set writes it: what is read as an int, and nothing else (no 1e3, 0x10, 007).
PLAIN_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")

MAXTEXT_TRAIN_MODULE = "maxtext.trainers.pre_train.train"

# The MaxText training image, name:tag inside the spec's Artifact Registry repository: the one
# place its tag is written. cloudbuild/image-maxtext.yaml reads it (and builds that MaxText
# version into it); every recipe whose image.registry names it must pull exactly this tag.
MAXTEXT_VERSION = "0.2.5"
MAXTEXT_IMAGE_NAME = "maxtext"
MAXTEXT_IMAGE = f"{MAXTEXT_IMAGE_NAME}:{MAXTEXT_VERSION}"
# The ray runtime's image: Ray (workloads.ray.RAY_VERSION) + that MaxText + this repository's
# workloads/ray entrypoint, in the same registry. A recipe that pulls MAXTEXT_IMAGE pulls this
# one instead when it runs on ray.
RAY_IMAGE_NAME = "ray-maxtext"
RAY_IMAGE = f"{RAY_IMAGE_NAME}:{RAY_VERSION}-maxtext-{MAXTEXT_VERSION}"


# An image reference as the kubelet parses it (the OCI distribution grammar), pinned by a
# tag or a digest: anything else is refused before a run, not met as InvalidImageName
# on a pod that already holds its TPUs.
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
IMAGE_REFERENCE = re.compile(rf"(?P<repo>{_REPOSITORY})(?::{_TAG})?(?:@{_DIGEST})?")
REGISTRY_IMAGE = re.compile(rf"{_PATH_PART}(?:/{_PATH_PART})*:{_TAG}")  # name:tag inside the spec's repository
IMAGE_REPOSITORY_MAX = 255  # the distribution spec's limit on the repository part


def runs_pinned_maxtext(image: str) -> bool:
    """Whether ``image`` (a registry name:tag or a full reference) is the toolkit's pinned MaxText.

    Keys are validated against the MaxText a run uses: the pinned image's keys are known
    (``_maxtext_keys.yaml``); any other image is a MaxText the toolkit has not read, whose keys
    go through as written (a recipe tuned for a newer MaxText needs its newer keys).
    """
    return image in (MAXTEXT_IMAGE, RAY_IMAGE) or image.endswith((f"/{MAXTEXT_IMAGE}", f"/{RAY_IMAGE}"))


def image_problem(ref: str) -> str | None:
    """Why ``ref`` is not a pinned image reference, or None."""
    m = IMAGE_REFERENCE.fullmatch(ref)
    if m is None:
        return "is not an image reference (registry/path:tag or @sha256:<digest>, lowercase path)"
    if len(m.group("repo")) > IMAGE_REPOSITORY_MAX:
        return f"has a repository name over {IMAGE_REPOSITORY_MAX} characters"
    if len(m.group("repo")) == len(ref):
        return "has no tag or digest"
    return None


_NON_FINITE = re.compile(r"^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
_INTEGER = re.compile(r"^[-+]?[0-9]+$")
INT64_MAX = 2**63 - 1


def number_problem(value: Any) -> str | None:
    """Why the value of a numeric MaxText key (``numeric_keys``) is a number MaxText cannot hold, else None
    (not a number: MaxText judges it).

    MaxText reads its config into Python, NumPy and JAX numbers: none holds a NaN or infinite
    setting (no MaxText 0.2.5 key has one by default; abort_on_nan_loss treats NaN as a
    failure), and none an integer past int64. Text is judged as MaxText's parser reads it.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "is not a finite number (MaxText takes finite numbers only)"
    if isinstance(value, int):
        return None if abs(value) <= INT64_MAX else "is beyond any integer MaxText can hold (int64)"
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _NON_FINITE.match(text):
        return "is not a finite number (MaxText takes finite numbers only)"
    if _INTEGER.match(text):
        return None if len(text.lstrip("+-")) <= 19 and abs(int(text)) <= INT64_MAX else "is beyond any integer MaxText can hold (int64)"
    try:
        number = float(text) if len(text) <= 64 else 0.0
    except ValueError:
        return None
    return None if math.isfinite(number) else "is beyond any float MaxText can hold (it reads as infinity)"


class RecipeError(ToolkitError):
    """A recipe that does not exist or does not validate."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Kind(str, Enum):
    MAXTEXT = "maxtext"
    COMMAND = "command"


class ImageRef(_Model):
    """Either a full reference, or a name:tag inside the spec's Artifact Registry."""

    ref: str | None = Field(None, description="full image reference with a tag or digest")
    registry: str | None = Field(None, description="name:tag in <region>-docker.pkg.dev/<project>/<repository>/")

    @model_validator(mode="after")
    def _one(self) -> ImageRef:
        if (self.ref is None) == (self.registry is None):
            raise ValueError("give exactly one of image.ref or image.registry")
        bad = image_problem(self.ref) if self.ref is not None else None
        if bad:
            raise ValueError(f"image.ref {self.ref[:300]!r} {bad}")
        if self.registry is not None and not REGISTRY_IMAGE.fullmatch(self.registry):
            raise ValueError(f"image.registry {self.registry[:300]!r} is not name:tag (lowercase name, tag of letters, digits, '_', '.', '-')")
        return self


class ModelDims(_Model):
    """The dimensions the planner checks sharding and memory against.

    Field names are MaxText's config keys; for ``model_name: default`` they are
    also emitted as arguments (there is no preset to load them from).
    """

    # Every size is an int32 in MaxText's configs and JAX shapes (defaults.INT32_MAX).
    base_emb_dim: int = Field(..., gt=0, le=INT32_MAX)
    base_num_query_heads: int = Field(..., gt=0, le=INT32_MAX)
    base_num_kv_heads: int = Field(..., gt=0, le=INT32_MAX)
    head_dim: int = Field(..., gt=0, le=INT32_MAX)
    base_num_decoder_layers: int = Field(..., gt=0, le=INT32_MAX)
    base_mlp_dim: int = Field(..., gt=0, le=INT32_MAX)
    vocab_size: int = Field(..., gt=0, le=INT32_MAX)
    # silu+linear is a gated MLP (3 matrices); a single activation is 2 matrices.
    mlp_matrices: int = Field(3, ge=2, le=3)
    tied_embedding: bool = Field(False, description="logits_via_embedding: output layer reuses the embedding")
    position_embeddings: int = Field(0, ge=0, le=INT32_MAX, description="learned position table rows (gpt3: trainable_position_size)")
    num_experts: int = Field(1, ge=1, le=INT32_MAX)
    num_experts_per_tok: int = Field(1, ge=1, le=INT32_MAX, description="routed experts each token runs through (MoE)")
    shared_experts: int = Field(0, ge=0, le=INT32_MAX, description="experts every token runs through besides the routed ones (MoE)")
    max_target_length: int = Field(2048, gt=0, le=INT32_MAX, description="sequence length the preset (or base.yml) uses")

    def params(self) -> int:
        """Parameter count: every routed expert once (what HBM holds; norms, biases, routers and
        shared experts ignored: < 1% of a mixture of experts this size)."""
        return self._count(self.num_experts)

    def active_params(self) -> int:
        """Parameters one token runs through: of a mixture of experts only its routed and shared experts.

        The FLOPs of a step follow these, not ``params()``: deepseek3-671b holds 256 routed
        experts per layer but runs a token through 8 (+1 shared).
        """
        if self.num_experts == 1:
            return self.params()
        return self._count(min(self.num_experts, self.num_experts_per_tok) + self.shared_experts)

    def _count(self, experts: int) -> int:
        q = self.base_num_query_heads * self.head_dim
        kv = self.base_num_kv_heads * self.head_dim
        attention = self.base_emb_dim * (q + 2 * kv) + q * self.base_emb_dim
        mlp = self.mlp_matrices * self.base_emb_dim * self.base_mlp_dim * experts
        embed = self.vocab_size * self.base_emb_dim * (1 if self.tied_embedding else 2)
        return self.base_num_decoder_layers * (attention + mlp) + embed + self.position_embeddings * self.base_emb_dim


# The MaxText keys ModelDims mirrors; a --set on one of them changes the model.
MODEL_KEYS = frozenset(["base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "head_dim", "base_num_decoder_layers", "base_mlp_dim", "vocab_size"])


class BatchRule(_Model):
    # Finite: an inf threshold or batch would make the HBM estimate inf. No TPU has a million GiB per device.
    min_hbm_gib_per_device: float = Field(..., ge=0, le=1e6, allow_inf_nan=False)
    per_device_batch_size: float = Field(..., gt=0, le=INT32_MAX, allow_inf_nan=False)


class Parallelism(_Model):
    """Mesh rule: degrees per axis; -1 on one axis means "the rest".

    ICI axes multiply to the devices of one slice, DCN axes to the number of slices.
    """

    ici: dict[str, int] = Field(default_factory=lambda: {"fsdp": FILL})
    dcn: dict[str, int] = Field(default_factory=lambda: {"data": FILL})

    @field_validator("ici", "dcn")
    @classmethod
    def _axes(cls, v: dict[str, int]) -> dict[str, int]:
        for axis, degree in v.items():
            if axis not in MESH_AXES:
                raise ValueError(f"unknown mesh axis {axis!r}; MaxText axes are {', '.join(MESH_AXES)}")
            if degree != FILL and degree < 1:
                raise ValueError(f"{axis}: degree must be >= 1 or -1 (fill), got {degree}")
            if degree > INT32_MAX:
                raise ValueError(f"{axis}: degree {degree} is above {INT32_MAX} (an int32, as MaxText holds it)")
        if sum(1 for d in v.values() if d == FILL) > 1:
            raise ValueError("at most one axis may be -1 (fill)")
        return v


class MaxTextSpec(_Model):
    config: str = "src/maxtext/configs/base.yml"
    model_name: str = "default"
    model: ModelDims
    args: dict[str, Any] = Field(default_factory=dict, description="MaxText key=value, in this order")
    per_device_batch: list[BatchRule] = Field(..., min_length=1, description="chosen by HBM per device")
    parallelism: Parallelism = Field(default_factory=Parallelism)

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:  # keys MaxText does not know: Recipe._pinned_keys (they depend on the image)
            if k in PLANNER_KEYS or k in MODEL_KEYS or k == "per_device_batch_size" or _mesh_key(k):
                raise ValueError(f"args.{k} is set by the planner or the model/per_device_batch/parallelism blocks; move it there")
        # Keys the planner reads, in their domain (the rest go to MaxText as they are).
        seq = v.get("max_target_length")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= INT32_MAX):
            raise ValueError(f"args.max_target_length is {seq!r}; it must be a positive integer (the sequence length) of at most {INT32_MAX}")
        numeric = numeric_keys()
        for k, value in v.items():
            bad = number_problem(value) if k in numeric else None
            if bad:
                raise ValueError(f"args.{k} {bad}")
        return v

    def batch_for(self, hbm_gib_per_device: float) -> float | None:
        fitting = [r for r in self.per_device_batch if r.min_hbm_gib_per_device <= hbm_gib_per_device]
        return max(fitting, key=lambda r: r.min_hbm_gib_per_device).per_device_batch_size if fitting else None


class SourceMount(_Model):
    """A volume the recipe's published launcher mounted (``import-recipe`` records it; ``workloads.planning.mounts``
    checks at plan time that the run mounts what the recipe's paths need)."""

    kind: Literal["gcs", "lustre", "volume"]
    source: str = Field(..., max_length=300, description="as the script named it: gs://BUCKET, a volume or xpk storage name")
    path: str | None = Field(None, pattern=r"^/", max_length=1000, description="where the container saw it (None: the script does not say)")
    read_only: bool = False


class PublishedFigure(_Model):
    """The step time the recipe's publisher measured, to set beside the planner's estimate."""

    step_seconds: float = Field(..., gt=0, le=1e6, allow_inf_nan=False)
    tflops: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False, description="TFLOP/s per device or per chip (see per)")
    tokens_per_second: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False, description="tokens/s per device or per chip (see per)")
    per: Literal["device", "chip"]
    step: int | None = Field(None, ge=0, le=INT32_MAX, description="the step of the sample log line")
    basis: str = Field(..., max_length=300, description="what the figure was read from: a sample log line or a summary-table row")
    source: str = Field(..., max_length=300, description="the README it was read from")
    date: str = Field(..., pattern=r"^\d{4}-\d{2}-\d{2}$", description="the day it was read (a README carries no date)")

    def line(self) -> str:
        """One line for `recipes` and `submit --dry-run`."""
        extra = [f"{self.tflops:g} TFLOP/s/{self.per}"] if self.tflops else []
        extra += [f"{self.tokens_per_second:g} tokens/s/{self.per}"] if self.tokens_per_second else []
        return f"{self.step_seconds:g} s/step" + (f" ({', '.join(extra)})" if extra else "") + f", {self.source} ({self.basis}), read {self.date}"


class Recipe(_Model):
    name: str = Field(..., pattern=r"^[a-z][-a-z0-9.]*[a-z0-9]$", max_length=30)
    description: str
    kind: Kind
    image: ImageRef
    steps: int = Field(..., ge=1, le=INT32_MAX, description="MaxText's step counter is an int32")
    shapes: list[str] = Field(default_factory=list, description="preferred slice shapes (catalog keys, e.g. v5e-4x4), best first")
    generations: list[str] = Field(default_factory=lambda: list(GENERATIONS), min_length=1, description="generations the recipe runs on")
    min_chips_per_slice: int = Field(1, ge=1, le=INT32_MAX)
    slices: int = Field(1, ge=1, le=INT32_MAX, description="slices a run takes unless --slices says otherwise (an imported recipe's --num-slices)")
    libtpu_init_args: dict[str, list[str]] = Field(default_factory=dict, description="LIBTPU_INIT_ARGS by generation; 'default' for the rest")
    env: dict[str, str] = Field(default_factory=dict)
    fatal_exit_codes: list[int] = Field(
        default_factory=list, description="exit codes that end the run at once, besides 1 and 2 (program errors: a rerun cannot help)"
    )
    maxtext: MaxTextSpec | None = None
    command: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)
    runtimes: list[str] = Field(default_factory=lambda: ["jobset", "job"], min_length=1, description="how it may run (submit --runtime), the default first")
    dataset: str | None = Field(
        None, max_length=40, description="a dataset of the spec's datasets: the run trains on (--dataset wins); none: the recipe's own data args"
    )
    multi_tier_checkpointing: bool = Field(False, description="checkpoint through GKE's multi-tier checkpointing (as --multi-tier-checkpointing)")
    checkpoint_storage: str | None = Field(None, description="gcs, gcsfuse or lustre (as --checkpoint-storage; the flag wins)")
    mounts: list[SourceMount] = Field(default_factory=list, description="volumes the published launcher mounted (import-recipe)")
    published: PublishedFigure | None = Field(None, description="the publisher's measured step time (import-recipe, from the README)")

    @model_validator(mode="after")
    def _pinned_keys(self) -> Recipe:
        """With the pinned MaxText image, every args key must be one of its keys; another image keeps them."""
        if self.maxtext is not None and runs_pinned_maxtext(self.image.ref or self.image.registry or ""):
            known = maxtext_keys()
            for k in self.maxtext.args:
                if k not in known:
                    raise ValueError(f"maxtext.args.{k} is not a MaxText {MAXTEXT_VERSION} key (the recipe's image); name another MaxText image, or drop it")
        return self

    def unknown_keys(self) -> list[str]:
        """The args keys the pinned MaxText does not have (kept because the recipe names another image)."""
        known = maxtext_keys()
        return [k for k in (self.maxtext.args if self.maxtext else {}) if k not in known]

    @field_validator("runtimes")
    @classmethod
    def _runtimes(cls, v: list[str]) -> list[str]:
        for r in v:
            if r not in RUNTIMES:
                raise ValueError(f"unknown runtime {r!r}; use {', '.join(RUNTIMES)}")
        if len(set(v)) != len(v):
            raise ValueError("a runtime is listed twice; list each once")
        return v

    @field_validator("generations")
    @classmethod
    def _gens(cls, v: list[str]) -> list[str]:
        for g in v:
            if g not in GENERATIONS:
                raise ValueError(f"unknown generation {g!r}; use {', '.join(GENERATIONS)}")
        return v

    @field_validator("fatal_exit_codes")
    @classmethod
    def _fatal(cls, v: list[int]) -> list[int]:
        for code in v:
            if not 1 <= code <= 127:
                # 128+N is a death by signal N (137 an OOM kill or SIGKILL, 143 SIGTERM): the
                # platform's doing, never the program's, so it must stay restartable.
                raise ValueError(f"{code} is not a program exit code; use 1-127 (128 and up are deaths by signal, which stay restartable)")
        return sorted(set(v))

    @field_validator("libtpu_init_args")
    @classmethod
    def _libtpu(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for g in v:
            if g != "default" and g not in GENERATIONS:
                raise ValueError(f"libtpu_init_args.{g}: use a generation ({', '.join(GENERATIONS)}) or 'default'")
        return v

    @model_validator(mode="after")
    def _kind(self) -> Recipe:
        if self.kind is Kind.MAXTEXT and (self.maxtext is None or self.command is not None):
            raise ValueError("kind maxtext needs a maxtext block and no command")
        if self.kind is Kind.COMMAND and (self.command is None or self.maxtext is not None):
            raise ValueError("kind command needs a command and no maxtext block")
        return self

    @model_validator(mode="after")
    def _carried(self) -> Recipe:
        """Every text the recipe hands its program can reach it (``carry``: no NUL, UTF-8, within Linux's limits)."""
        texts: list[tuple[str, str]] = [(f"command[{i}]", w) for i, w in enumerate(self.command or [])]
        texts += [(f"env.{k}", v) for k, v in self.env.items()]
        texts += [(f"libtpu_init_args.{g}", f) for g, flags in self.libtpu_init_args.items() for f in flags]
        if self.maxtext is not None:
            m = self.maxtext
            texts += [("maxtext.config", m.config), ("maxtext.model_name", m.model_name)]
            texts += [(f"maxtext.args.{k}", f"{k}={v}") for k, v in m.args.items()]
        for where, text in texts:
            bad = carry.problem(text)
            if bad:
                raise ValueError(f"{where} {bad}")
        for key in self.env:
            bad = carry.env_name_problem(key) or carry.problem(key)
            if bad:
                raise ValueError(f"env key {key[:60]!r} {bad}")
        return self

    def libtpu_flags(self, generation: str) -> list[str]:
        return list(self.libtpu_init_args.get(generation, self.libtpu_init_args.get("default", [])))


# Keys the planner owns: setting them through a recipe or --set would make the
# run disagree with its JobSet name, its bucket path or its step count.
PLANNER_KEYS = frozenset(["run_name", "steps", "hardware", "num_slices", "compile_topology", "compile_topology_num_slices"])


def _mesh_key(key: str) -> tuple[str, str] | None:
    """('ici'|'dcn', axis) for a mesh key such as ici_fsdp_parallelism."""
    for level in ("ici", "dcn"):
        prefix = f"{level}_"
        if key.startswith(prefix) and key.endswith("_parallelism"):
            return level, key[len(prefix) : -len("_parallelism")]
    return None


mesh_key = _mesh_key


@lru_cache(maxsize=1)
def maxtext_keys() -> frozenset[str]:
    return frozenset(load_yaml(MAXTEXT_KEYS_FILE.read_text())["keys"])


@lru_cache(maxsize=1)
def numeric_keys() -> frozenset[str]:
    """The MaxText keys that take a number (their base.yml default is one): their values are held to ``number_problem``."""
    return frozenset(load_yaml(MAXTEXT_NUMBERS_FILE.read_text())["numeric"])


def suggest(word: str, choices: list[str] | frozenset[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _recipe_files(directory: Path) -> dict[str, Path]:
    return {p.stem: p for p in directory.glob("*.yaml") if not p.name.startswith("_")} if directory.is_dir() else {}


def recipe_files() -> dict[str, Path]:
    """Recipe name -> file: the shipped ones, then the user's (``paths.user_recipes_dir``).
    A shipped name wins, so a user file can never change what a shipped recipe means."""
    from toolkit.paths import user_recipes_dir

    return {**_recipe_files(user_recipes_dir()), **_recipe_files(RECIPES_DIR)}


def recipe_names() -> list[str]:
    return sorted(recipe_files())


def _shown(path: Path) -> str:
    return str(path.relative_to(RECIPES_DIR.parent.parent)) if path.is_relative_to(RECIPES_DIR) else str(path)


def shown_path(name: str) -> str:
    """Recipe ``name``'s file as a fix text names it: ``workloads/recipes/<name>.yaml`` for a shipped
    recipe, the file itself for one of the user's (``$TGK_RECIPES``, where ``import-recipe`` writes)."""
    return _shown(recipe_files().get(name) or RECIPES_DIR / f"{name}.yaml")


def _format(e: ValidationError, name: str, path: Path | None = None) -> str:
    first = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    fix = f" — fix it in {_shown(path or RECIPES_DIR / f'{name}.yaml')}"
    return f"recipe {name}: {where}: {msg}{fix}" if where else f"recipe {name}: {msg}{fix}"


@cache
def load_recipe(name: str) -> Recipe:
    """Load a shipped recipe by name; unknown names list the known ones."""
    files = recipe_files()
    if name not in files:
        names = sorted(files)
        raise RecipeError(f"recipe: no recipe {name!r}{suggest(name, names)} — use one of {', '.join(names)}")
    path = files[name]
    try:
        data = load_yaml(read_capped(path))
    except OSError as e:
        raise RecipeError(f"recipe {name}: cannot read {path}: {e.strerror} — check the file and its permissions") from None
    except YamlFileError as e:
        where = f"{e.key_path}: " if e.key_path else f"{path.name} "
        raise RecipeError(f"recipe {name}: {where}{e.problem} — {e.fix}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {name}: {path.name} is not a YAML mapping — start from workloads/recipes/maxtext-6b.yaml")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(_format(e, name, path)) from None
    if recipe.name != name:
        raise RecipeError(f"recipe {name}: name is {recipe.name!r} but the file is {path.name}; make them agree")
    check_image(recipe)
    return recipe


def check_image(recipe: Recipe) -> None:
    """A recipe that pulls the MaxText image pulls the tag the image pipeline pushes."""
    reg = recipe.image.registry
    if reg is not None and reg.split(":", 1)[0] == MAXTEXT_IMAGE_NAME and reg != MAXTEXT_IMAGE:
        raise RecipeError(
            f"recipe {recipe.name}: image.registry: {reg} is not the image cloudbuild/image-maxtext.yaml pushes"
            f" ({MAXTEXT_IMAGE}) — use {MAXTEXT_IMAGE}, or move MAXTEXT_IMAGE in workloads/planning/recipes.py"
        )


def all_recipes() -> list[Recipe]:
    return [load_recipe(n) for n in recipe_names()]


def summary(recipe: Recipe) -> dict[str, Any]:
    """What `recipes` lists."""
    out: dict[str, Any] = {
        "name": recipe.name,
        "kind": recipe.kind.value,
        "description": recipe.description,
        "image": recipe.image.ref or f"<registry>/{recipe.image.registry}",
        "steps": recipe.steps,
        "shapes": recipe.shapes,
        "generations": recipe.generations,
        "runtimes": recipe.runtimes,
    }
    if recipe.maxtext:
        m = recipe.maxtext
        out["model_name"] = m.model_name
        out["params_billion"] = round(m.model.params() / 1e9, 2)
        out["per_device_batch"] = {f">={r.min_hbm_gib_per_device:g}GiB": r.per_device_batch_size for r in m.per_device_batch}
        out["parallelism"] = {"ici": m.parallelism.ici, "dcn": m.parallelism.dcn}
    if recipe.published is not None:
        out["published"] = recipe.published.model_dump(exclude_none=True)
    return out


def listable_recipes() -> tuple[list[Recipe], list[str]]:
    """Every recipe that loads, and one line per file that does not (its own error, which names the file and the fix).

    What ``recipes`` lists: one broken file in the user's directory must not hide the others;
    ``submit`` of the broken one still fails with that line (``load_recipe``).
    """
    from toolkit.paths import RECIPES_ENV_VAR, user_recipes_dir

    good: list[Recipe] = []
    broken: list[str] = []
    user = user_recipes_dir()
    if user.exists() and not user.is_dir():
        broken.append(f"recipes: {user} is not a directory, so no recipe of yours is listed — point ${RECIPES_ENV_VAR} at a directory of <name>.yaml files")
    for name in recipe_names():
        try:
            good.append(load_recipe(name))
        except RecipeError as e:
            broken.append(str(e))
    return good, broken
