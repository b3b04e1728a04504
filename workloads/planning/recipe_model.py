"""The recipe model: what a recipe file may say, validated into frozen pydantic objects.

A recipe names the image, the program (MaxText with a model and its arguments, or a plain
command), XLA/libtpu flags, default steps, the TPU shapes it was sized for, and *rules*
instead of numbers where the right number depends on the target: the per-device batch by
HBM per device (``BatchRule``), and the mesh by devices per slice and slices
(``Parallelism``). The planner turns a recipe plus a target into concrete numbers and checks
them (``workloads.planning.planner``); ``workloads.planning.recipes`` finds and loads the files.

Unknown keys are errors, as in the environment spec.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infra.catalog import GENERATIONS
from workloads.planning import program_text, secret_env
from workloads.planning.defaults import INT32_MAX
from workloads.planning.image_reference import REGISTRY_IMAGE, image_problem
from workloads.planning.images import MAXTEXT_VERSION, runs_pinned_maxtext
from workloads.planning.maxtext_keys import FILL, MESH_AXES, MODEL_KEYS, PLANNER_KEYS, maxtext_keys, mesh_key, numeric_keys
from workloads.planning.maxtext_numbers import number_problem
from workloads.planning.model import RUNTIMES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Kind(str, Enum):
    MAXTEXT = "maxtext"  # MaxText's pre-training trainer
    SFT = "sft"  # MaxText's supervised fine-tuning trainer, on a conversation dataset of the spec
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
    # The structure of the larger presets, so parameters and FLOPs follow what MaxText builds
    # (scripts/gen_maxtext_models.py reads them from the presets; 0 means "not this model's").
    first_dense_layers: int = Field(0, ge=0, le=INT32_MAX, description="leading layers with a dense MLP instead of experts (deepseek3: 3)")
    moe_every: int = Field(1, ge=1, le=INT32_MAX, description="every Nth layer has experts, the others a dense MLP (llama4-17b-128e: 2)")
    dense_mlp_dim: int = Field(0, ge=0, le=INT32_MAX, description="a mixture of experts' dense-layer MLP width (0: base_mlp_dim)")
    shared_mlp_dim: int = Field(0, ge=0, le=INT32_MAX, description="a shared expert's MLP width (0: base_mlp_dim, the routed experts')")
    q_lora_rank: int = Field(0, ge=0, le=INT32_MAX, description="multi-head latent attention: query low rank (0: a full query projection)")
    kv_lora_rank: int = Field(0, ge=0, le=INT32_MAX, description="multi-head latent attention: key/value low rank (0: not MLA)")
    qk_rope_head_dim: int = Field(0, ge=0, le=INT32_MAX, description="MLA: the rotary part of head_dim (head_dim = nope + rope)")
    v_head_dim: int = Field(0, ge=0, le=INT32_MAX, description="MLA: value head width (0: head_dim)")
    sliding_window: int = Field(0, ge=0, le=INT32_MAX, description="local layers attend this many tokens back (0: every layer global)")
    global_every: int = Field(1, ge=1, le=INT32_MAX, description="with sliding_window: every Nth layer attends globally")
    global_head_dim: int = Field(0, ge=0, le=INT32_MAX, description="gemma4: the global layers' head width (0: head_dim)")
    global_kv_heads: int = Field(0, ge=0, le=INT32_MAX, description="gemma4: the global layers' key/value heads (0: base_num_kv_heads)")
    scan_block: int = Field(1, ge=1, le=INT32_MAX, description="layers MaxText scans, and rematerializes, as one unit (gemma3: 6; gpt-oss: its layer cycle, 2)")
    shared_kv: bool = Field(False, description="one projection serves keys and values (share_kv_projections)")
    fused_qkv: bool = Field(False, description="one query/key/value projection (MaxText's fused_qkv: gpt3), named qkv_proj for remat")
    fused_mlp: bool = Field(False, description="one MLP input projection (MaxText's fused_mlp), named mlpwi for remat")
    # The small parameters beside the matrices (the train state holds them, replicated when their axis
    # maps to no mesh axis): which ones the model's layers create.
    qkv_bias: bool = Field(False, description="the query/key/value projections carry biases (gpt3; attention_bias)")
    out_bias: bool = Field(False, description="the attention output projection carries a bias (gpt3; attention_bias except qwen2)")
    mlp_bias: bool = Field(False, description="the MLP (or every expert's) projections carry biases (gpt3; mlp_bias: gpt-oss)")
    routed_bias: bool = Field(False, description="the router carries a trained bias per expert (routed_bias: gpt-oss)")
    attention_sinks: bool = Field(False, description="a learned sink logit per query head and layer (attention_sink: gpt-oss)")
    norm_bias: bool = Field(False, description="the layer norms carry a bias beside their scale (gpt3's LayerNorm)")

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def layer_counts(self) -> tuple[int, int]:
        """(layers with routed experts, layers with a dense MLP)."""
        layers = self.base_num_decoder_layers
        if self.num_experts == 1:
            return 0, layers
        first = min(self.first_dense_layers, layers)
        moe = (layers - first) // self.moe_every if self.moe_every > 1 else layers - first
        return moe, layers - moe

    def scan_units(self) -> tuple[int, int]:
        """(units the layers are scanned in, layers in the largest): a block of ``scan_block`` layers each, the rest one more unit."""
        layers, k = self.base_num_decoder_layers, max(1, self.scan_block)
        return layers // k + (1 if layers % k else 0), min(k, layers)

    def attention_layers(self) -> tuple[int, int]:
        """(global layers, local sliding-window layers)."""
        layers = self.base_num_decoder_layers
        if not self.sliding_window or self.global_every <= 1:
            return layers, 0
        glob = layers // self.global_every
        return glob, layers - glob

    def attention_params(self) -> int:
        """Every layer's query, key, value and output projections."""
        e, h = self.base_emb_dim, self.base_num_query_heads
        if self.mla:
            rope = self.qk_rope_head_dim
            v = self.v_head_dim or self.head_dim
            q = e * self.q_lora_rank + self.q_lora_rank * h * self.head_dim if self.q_lora_rank else e * h * self.head_dim
            kv = e * (self.kv_lora_rank + rope) + self.kv_lora_rank * h * (self.head_dim - rope + v)
            return self.base_num_decoder_layers * (q + kv + h * v * e)
        kv_mats = 1 if self.shared_kv else 2
        glob, local = self.attention_layers()
        g_hd, g_kv = (self.global_head_dim or self.head_dim), (self.global_kv_heads or self.base_num_kv_heads)
        per_local = e * (h + kv_mats * self.base_num_kv_heads) * self.head_dim + h * self.head_dim * e
        per_global = e * (h + kv_mats * g_kv) * g_hd + h * g_hd * e
        return local * per_local + glob * per_global

    def mlp_params(self, experts: int | None = None) -> int:
        """Dense MLPs, shared experts and routers, plus ``experts`` routed experts per MoE layer (None: every one)."""
        e, mm = self.base_emb_dim, self.mlp_matrices
        moe, dense = self.layer_counts()
        if self.num_experts == 1:
            return dense * mm * e * self.base_mlp_dim
        routed = self.num_experts if experts is None else experts
        per_moe = mm * e * self.base_mlp_dim * routed + self.shared_experts * mm * e * (self.shared_mlp_dim or self.base_mlp_dim) + e * self.num_experts
        return moe * per_moe + dense * mm * e * (self.dense_mlp_dim or self.base_mlp_dim)

    def embedding_params(self) -> int:
        return self.vocab_size * self.base_emb_dim * (1 if self.tied_embedding else 2) + self.position_embeddings * self.base_emb_dim

    def params(self) -> int:
        """Parameter count: what HBM holds (every routed expert once; norms and biases left out, < 0.1%)."""
        return self.attention_params() + self.mlp_params() + self.embedding_params()

    def active_params(self) -> int:
        """Parameters one token runs through: of a mixture of experts only its routed and shared experts.

        The FLOPs of a step follow these, not ``params()``: deepseek3-671b holds 256 routed
        experts per layer but runs a token through 8 (+1 shared).
        """
        if self.num_experts == 1:
            return self.params()
        return self.attention_params() + self.mlp_params(min(self.num_experts, self.num_experts_per_tok)) + self.embedding_params()


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
            if k in PLANNER_KEYS or k in MODEL_KEYS or k == "per_device_batch_size" or mesh_key(k):
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
    path: str | None = Field(None, pattern=r"^/[ -~]*$", max_length=1000, description="where the container saw it (None: the script does not say)")
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
    date: str = Field(..., pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description="the day it was read (a README carries no date)")

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
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        max_length=100,
        description="NAME: SECRET/KEY — environment variables from Kubernetes Secrets in the team's namespace (as --secret-env; the flag wins)",
    )
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
        if self.kind in (Kind.MAXTEXT, Kind.SFT) and (self.maxtext is None or self.command is not None):
            raise ValueError(f"kind {self.kind.value} needs a maxtext block and no command")
        if self.kind is Kind.COMMAND and (self.command is None or self.maxtext is not None):
            raise ValueError("kind command needs a command and no maxtext block")
        return self

    @model_validator(mode="after")
    def _carried(self) -> Recipe:
        """Every text the recipe hands its program can reach it (``program_text``: no NUL, UTF-8, within Linux's limits)."""
        texts: list[tuple[str, str]] = [(f"command[{i}]", w) for i, w in enumerate(self.command or [])]
        texts += [(f"env.{k}", v) for k, v in self.env.items()]
        texts += [(f"libtpu_init_args.{g}", f) for g, flags in self.libtpu_init_args.items() for f in flags]
        if self.maxtext is not None:
            m = self.maxtext
            texts += [("maxtext.config", m.config), ("maxtext.model_name", m.model_name)]
            texts += [(f"maxtext.args.{k}", f"{k}={v}") for k, v in m.args.items()]
        for where, text in texts:
            bad = program_text.problem(text)
            if bad:
                raise ValueError(f"{where} {bad}")
        for key in self.env:
            bad = program_text.env_name_problem(key) or program_text.problem(key)
            if bad:
                raise ValueError(f"env key {key[:60]!r} {bad}")
            secret = program_text.secret_env_problem(key)
            if secret:
                raise ValueError(f"env.{secret[0]} — {secret[1]}")
        for key in self.maxtext.args if self.maxtext is not None else ():
            secret = program_text.secret_key_problem(key)
            if secret:
                raise ValueError(f"maxtext.args.{secret[0]} — {secret[1]}")
        for name, ref in self.secret_env.items():
            bad = secret_env.reference_problem(name, ref)
            if bad:
                raise ValueError(f"secret_env: {bad} — write it like HF_TOKEN: hf-token/token (a Secret in the team's namespace, and its key)")
        return self

    def libtpu_flags(self, generation: str) -> list[str]:
        return list(self.libtpu_init_args.get(generation, self.libtpu_init_args.get("default", [])))
