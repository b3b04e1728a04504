"""How long a MaxText training step takes: the work of the step, at what each kind of work reaches of the chip's peak. Pure.

The work, per device and step (``forward_work``, from the model's structure, ``ModelDims``):

    dense matmuls     query/key/value and output projections, dense MLPs, shared experts,
                      routers and the output layer: 2 x their parameters per token, forward
    routed experts    the experts a token runs through (num_experts_per_tok), not all of them
    attention         the scores and the weighted values: causal, 2 x seq x heads x head_dim per
                      token, less in sliding-window (local) layers; multi-head latent attention's widths

Training runs the forward once and the backward (twice the forward), and computes again
what the remat policy did not keep (``workloads.planning.remat``: the query/key/value,
attention, output projection or MLP input of every layer). So each kind costs
``(3 + recomputed) x forward`` FLOPs, and takes

    time = FLOPs / (devices' peak for its precision x its efficiency)

dense matmuls at the fp8 or int8 peak when the run is quantized (``quantization``; where
the catalog gives the chip a faster path), experts and attention at the bf16 peak (the
published fp8 mixture-of-experts recipes gain only their dense part). A mixture of experts
spread over an expert axis adds its all-to-alls: the tokens' activations to the experts
and back, four times per layer, over the chip's ICI bandwidth.

The efficiencies are not assumed: ``scripts/bench_step_time.py`` fits them to every step
time tpu-recipes publishes (``workloads/recipes/_published_step_times.yaml``: the Ironwood
table, the Trillium and v5p README log lines) by relative least squares, and measures the
error that remains leave-one-out (each figure estimated by the efficiencies fitted
without it). That residual, per kind of run, is ``STEP_ERROR``: what a plan prints beside
its estimate. v5e and v4 publish no figure: they take the lowest fitted dense efficiency
and print no measured error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.catalog import Generation
from workloads.planning.recipe_model import ModelDims
from workloads.planning.remat import remat_of


@dataclass(frozen=True)
class Work:
    """Forward FLOPs per token, by kind (``forward_work``)."""

    qkv: float
    attention: float
    out: float
    mlp_in: float
    mlp_out: float
    experts_in: float
    experts_out: float
    unembed: float

    @property
    def model_flops(self) -> float:
        """Training FLOPs per token as MaxText counts them for TFLOP/s (forward + backward, nothing recomputed)."""
        return 3 * (self.qkv + self.attention + self.out + self.mlp_in + self.mlp_out + self.experts_in + self.experts_out + self.unembed)


def forward_work(m: ModelDims, seq: int) -> Work:
    e, h = m.base_emb_dim, m.base_num_query_heads
    layers = m.base_num_decoder_layers
    glob, local = m.attention_layers()
    if m.mla:
        v = m.v_head_dim or m.head_dim
        attention = layers * seq * h * (m.head_dim + v)  # causal: half of 2 x seq x heads x (qk + v)
        out = layers * 2 * h * v * e
    else:
        g_hd = m.global_head_dim or m.head_dim
        window = min(m.sliding_window, seq)
        local_per_token = 4 * (seq * window - window * window / 2) / seq * h * m.head_dim if window else 2 * seq * h * m.head_dim
        attention = glob * 2 * seq * h * g_hd + local * local_per_token
        out = local * 2 * h * m.head_dim * e + glob * 2 * h * g_hd * e
    qkv = 2 * m.attention_params() - out
    moe, dense = m.layer_counts()
    mm = m.mlp_matrices
    if m.num_experts == 1:
        mlp_in, mlp_out, experts_in, experts_out = dense * 2 * e * m.base_mlp_dim * (mm - 1), dense * 2 * e * m.base_mlp_dim, 0.0, 0.0
    else:
        d, s = m.dense_mlp_dim or m.base_mlp_dim, m.shared_mlp_dim or m.base_mlp_dim
        k = min(m.num_experts, m.num_experts_per_tok)
        mlp_in = dense * 2 * e * d * (mm - 1) + moe * (m.shared_experts * 2 * e * s * (mm - 1) + 2 * e * m.num_experts)
        mlp_out = dense * 2 * e * d + moe * m.shared_experts * 2 * e * s
        experts_in, experts_out = moe * k * 2 * e * m.base_mlp_dim * (mm - 1), moe * k * 2 * e * m.base_mlp_dim
    return Work(qkv, attention, out, mlp_in, mlp_out, experts_in, experts_out, 2 * e * m.vocab_size)


# ------------------------------------------------------------------ efficiencies

# Fitted by scripts/bench_step_time.py to the published figures (read 2026-11-27): the fraction
# of the peak each kind of work reaches, recomputation counted as work. Dense, by generation.
DENSE_EFFICIENCY = {"tpu7x": 0.596, "v6e": 0.53, "v5p": 0.953}
# A quantized run's dense matmuls, at the fp8 / int8 peak: this times the generation's dense efficiency.
QUANTIZED_EFFICIENCY = {"fp8": 0.955, "int8": 0.576}
EXPERT_EFFICIENCY = 0.255
ATTENTION_EFFICIENCY = 0.313
# Published / estimated step time, least and most, leave-one-out over the published figures of
# each kind (scripts/bench_step_time.py). A plan prints it beside its estimate.
STEP_ERROR: dict[str, tuple[float, float]] = {
    "dense, bf16": (0.8, 1.49),
    "dense, quantized": (0.96, 1.04),
    "mixture of experts": (0.69, 1.59),
}


@dataclass(frozen=True)
class Efficiency:
    """The efficiencies a step is priced at (the shipped ones by default; the benchmark fits its own)."""

    dense: Mapping[str, float]
    quantized: Mapping[str, float]
    experts: float
    attention: float


SHIPPED = Efficiency(DENSE_EFFICIENCY, QUANTIZED_EFFICIENCY, EXPERT_EFFICIENCY, ATTENTION_EFFICIENCY)


def precision(args: Mapping[str, str]) -> str:
    """``fp8``, ``int8`` or ``bf16``: what the run's dense matmuls compute in (MaxText ``quantization``)."""
    q = args.get("quantization", "").strip().lower()
    if q.startswith("fp8") or q.endswith("fp8"):
        return "fp8"
    if q == "int8":
        return "int8"
    return "bf16"


@dataclass(frozen=True)
class StepParts:
    """A step's seconds by kind, each at efficiency 1 (``step_parts``); the benchmark fits the efficiencies to these."""

    dense: float
    quantized: str  # "bf16", or the precision the dense part runs at
    experts: float
    attention: float
    all_to_all: float  # seconds, not scaled by an efficiency (bytes over the ICI bandwidth)
    model_flops: float  # per device, MaxText's count
    moe: bool

    @property
    def kind(self) -> str:
        if self.moe:
            return "mixture of experts"
        return "dense, bf16" if self.quantized == "bf16" else "dense, quantized"

    def seconds(self, eff: Efficiency, generation: str) -> float:
        dense_eff = eff.dense.get(generation, min(eff.dense.values()))
        if self.quantized != "bf16":
            dense_eff *= eff.quantized.get(self.quantized, 1.0)
        return self.dense / dense_eff + self.experts / eff.experts + self.attention / eff.attention + self.all_to_all


def step_parts(m: ModelDims, tokens_per_device: float, seq: int, gen: Generation, args: Mapping[str, str], expert_parallelism: int = 1) -> StepParts:
    """The step's work on one device, as seconds at the device's peak (see the module doc)."""
    w = forward_work(m, seq)
    again = remat_of(args).recomputed()

    def cost(part: str, forward: float) -> float:
        return (3 + (1 if part in again else 0)) * forward * tokens_per_device

    prec = precision(args)
    bf16 = gen.peak_bf16_tflops_per_chip / gen.devices_per_chip * 1e12
    fast = {"fp8": gen.peak_fp8_tflops_per_chip, "int8": gen.peak_int8_tops_per_chip}.get(prec)
    quantized = prec if fast else "bf16"
    dense_peak = fast / gen.devices_per_chip * 1e12 if fast else bf16
    dense = cost("qkv", w.qkv) + cost("out", w.out) + cost("mlp_in", w.mlp_in) + 3 * (w.mlp_out + w.unembed) * tokens_per_device
    experts = cost("mlp_in", w.experts_in) + 3 * w.experts_out * tokens_per_device
    moe = m.num_experts > 1
    sparse = args.get("sparse_matmul", "true").strip().lower() != "false"
    if moe and not sparse:
        # Dense-matmul experts (sparse_matmul=false): every expert's einsum over its capacity of tokens.
        capacity = _number(args.get("capacity_factor", "-1"))
        dense += experts * (capacity if capacity > 1 else m.num_experts / min(m.num_experts, m.num_experts_per_tok))
        experts = 0.0
    all_to_all = 0.0
    if moe and expert_parallelism > 1:
        layers, _ = m.layer_counts()
        sent = tokens_per_device * min(m.num_experts, m.num_experts_per_tok) * m.base_emb_dim * 2 * (expert_parallelism - 1) / expert_parallelism
        all_to_all = 4 * layers * sent / (gen.ici_gbytes_per_s_per_chip * 1e9 / gen.devices_per_chip)
    return StepParts(
        dense=dense / dense_peak,
        quantized=quantized,
        experts=experts / bf16,
        attention=cost("attention", w.attention) / bf16,
        all_to_all=all_to_all,
        model_flops=w.model_flops * tokens_per_device,
        moe=moe,
    )


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return -1.0


@dataclass(frozen=True)
class StepEstimate:
    seconds: float
    kind: str  # "dense, bf16", "dense, quantized" or "mixture of experts"
    model_flops_per_device: float  # MaxText's count (no recomputation): what its TFLOP/s reports
    mfu: float  # model FLOPs over the step at the device's bf16 peak, as MaxText reports it
    error: tuple[float, float] | None  # published / estimated for this kind of run, least and most; None: not measured

    def error_text(self) -> str:
        """What the measured error says about this estimate, for a plan's output."""
        if self.error is None:
            return "no published step time measures this generation"
        lo, hi = self.error
        return f"published {self.kind} runs took {lo:g}-{hi:g}x this model's estimate (leave-one-out)"


def estimate(m: ModelDims, tokens_per_device: float, seq: int, gen: Generation, args: Mapping[str, str], expert_parallelism: int = 1) -> StepEstimate:
    parts = step_parts(m, tokens_per_device, seq, gen, args, expert_parallelism)
    seconds = parts.seconds(SHIPPED, gen.name)
    return StepEstimate(
        seconds=seconds,
        kind=parts.kind,
        model_flops_per_device=parts.model_flops,
        mfu=parts.model_flops / seconds / (gen.peak_bf16_tflops_per_chip / gen.devices_per_chip * 1e12),
        error=STEP_ERROR.get(parts.kind) if gen.name in DENSE_EFFICIENCY else None,
    )
