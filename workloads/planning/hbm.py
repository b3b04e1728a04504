"""HBM per device of a MaxText training step: what XLA allocates for it, part by part. Pure.

The compiled step (``workloads.maxtext.aot``: arguments + outputs - aliased + temporaries)
holds, per device:

    state        the train state, donated in and out: fp32 weights (4 B a parameter) and
                 Adam's two moments (8 B), each weight split by the mesh axes MaxText
                 shards it over (``mesh.weight_dims``); the moments on the host with
                 optimizer_memory_host_offload
    gradients    fp32, shaped like the weights (4 B), and the bf16 copy of the weights the
                 layers compute with (2 B)
    saved        what the remat policy keeps of every layer for the backward pass
                 (``workloads.planning.remat``): the layer's input, and each kept projection,
                 in bf16 per token; what it offloads lives in host memory
    working      one layer's forward and backward in flight: its MLP (or routed experts')
                 activations, its embedding-wide and attention tensors, and its weights
                 gathered from their FSDP shards
    logits       the output layer's logits and their gradient (bf16, tokens x vocabulary /
                 num_vocab_tiling), and the embedding tables gathered for them

Tokens per device are ``per_device_batch_size x max_target_length`` (a split over tensor,
sequence or context moves tokens and widths between devices, not bytes). How many buffers of
each kind XLA keeps at once, and its packing of them, are the coefficients below: fitted to
the compiled matrix of ``scripts/bench_hbm_calibration.py`` (MaxText 0.2.5, libtpu 0.0.52),
whose residual per kind of configuration is ``HBM_ERROR`` (compiled / estimated, least and
most). A plan is refused when even the least of that range is over the device's HBM, and
warned when the most of it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from workloads.planning.maxtext_numbers import PLAIN_INT
from workloads.planning.mesh import weight_dims
from workloads.planning.model import HbmEstimate
from workloads.planning.recipe_model import ModelDims
from workloads.planning.remat import remat_of

# Known, not fitted: the fp32 gradient accumulators and the bf16 copy of the weights (4 + 2 B a
# parameter held), and what the remat policy keeps, all layers once (the scan stacks it).
GRADIENT_BYTES = 6.0
EXACT = {"state": 1.0, "gradients": GRADIENT_BYTES, "saved": 1.0}


@dataclass(frozen=True)
class Coefficients:
    """How many buffers of each kind XLA allocates at once (fitted; see the module doc)."""

    offload_staging: float = 2.0  # x one layer of what the policy offloads, in flight on the device
    working_mlp: float = 6.0  # x tokens x MLP width (routed: experts per token) x 2 B
    working_embed: float = 14.0  # x tokens x embedding x 2 B
    working_weights: float = 2.0  # x one layer's weights gathered, bf16
    logits: float = 2.0  # x tokens x vocabulary x 2 B / num_vocab_tiling
    vocab_tables: float = 2.0  # x vocabulary x embedding x 2 B, gathered


FITTED = Coefficients()

# compiled / estimated, least and most, per kind of configuration (scripts/bench_hbm_calibration.py).
HBM_ERROR: dict[str, tuple[float, float]] = {}
UNMEASURED = (0.85, 1.15)  # a kind the matrix has no configuration of: the target, not a measurement


def _tiles(args: Mapping[str, str]) -> int:
    t = args.get("num_vocab_tiling", "1")
    return int(t) if PLAIN_INT.fullmatch(t) and 0 < len(t) < 6 and int(t) > 0 else 1


def _true(args: Mapping[str, str], key: str) -> bool:
    return args.get(key, "false").strip().lower() == "true"


def _shards(totals: Mapping[str, int], axes: tuple[str, ...], size: int) -> int:
    """What a dimension is split into: the axes' product when it divides the dimension (the planner refuses it otherwise)."""
    n = math.prod(totals.get(a, 1) for a in axes)
    return n if size % n == 0 else 1


def weight_bytes_per_device(m: ModelDims, totals: Mapping[str, int]) -> float:
    """Parameters held per device (a count, not bytes): each weight class over the mesh axes of its dimensions."""
    dims = {w.what: w for w in weight_dims(m)}

    def split(*whats: str) -> int:
        return math.prod(_shards(totals, dims[w].axes, dims[w].size) for w in whats if w in dims)

    embed_attn = "the embedding dimension of the attention and embedding weights"
    attention = m.attention_params() / split(embed_attn, "the query heads")
    embedding = m.embedding_params() / split(embed_attn, "the vocabulary")
    moe, dense = m.layer_counts()
    if m.num_experts == 1:
        mlp = m.mlp_params() / split("the embedding dimension of the MLP weights", "the MLP dimension")
    else:
        routed = m.mlp_params() - m.mlp_params(0)
        mlp = routed / split("the experts", "the experts' MLP dimension", "the embedding dimension of the expert weights")
        mlp += m.mlp_params(0) / split("the embedding dimension of the MLP weights", "the MLP dimension") if dense else m.mlp_params(0) / split(embed_attn)
    return attention + embedding + mlp


def _saved_per_token(m: ModelDims, args: Mapping[str, str]) -> tuple[float, float]:
    """(bf16 elements per token a layer keeps on the device, elements it offloads) for the run's remat policy."""
    r = remat_of(args)
    q = m.base_num_query_heads * m.head_dim
    kv = m.base_num_kv_heads * m.head_dim
    moe, dense = m.layer_counts()
    layers = m.base_num_decoder_layers
    width = m.dense_mlp_dim or m.base_mlp_dim
    k = min(m.num_experts, m.num_experts_per_tok)
    # Only the names the model's layers give their tensors: fused projections are one name, else one each.
    fused_qkv = args.get("fused_qkv", str(m.fused_qkv)).strip().lower() == "true"
    fused_mlp = args.get("fused_mlp", str(m.fused_mlp)).strip().lower() == "true"
    dense_share, moe_share = dense / layers, moe / layers  # of the layers, those with a dense MLP and those with experts
    sizes = {
        "decoder_layer_input": m.base_emb_dim,
        "query_proj": 0 if fused_qkv else q,
        "key_proj": 0 if fused_qkv or m.shared_kv else kv,
        "value_proj": 0 if fused_qkv or m.shared_kv else kv,
        "kv_proj": kv if m.shared_kv and not fused_qkv else 0,
        "qkv_proj": q + 2 * kv if fused_qkv else 0,
        "context": (m.v_head_dim or m.head_dim) * m.base_num_query_heads,
        "out_proj": m.base_emb_dim,
        "mlpwi_0": 0 if fused_mlp else width * dense_share,
        "mlpwi_1": 0 if fused_mlp or m.mlp_matrices < 3 else width * dense_share,
        "mlpwi": width * (m.mlp_matrices - 1) * dense_share if fused_mlp else 0,
        # An expert layer names its routed output mlpwo too (tokens x experts per token x embedding).
        "mlpwo": m.base_emb_dim * (dense_share + k * moe_share),
        "moe_mlpwi_0": k * m.base_mlp_dim * moe_share,
        "moe_mlpwi_1": k * m.base_mlp_dim * moe_share if m.mlp_matrices == 3 else 0,
        "moe_mlpwo": 0,  # the same tensor as its mlpwo
    }
    device = sum(sizes.get(n, 0) for n in r.device)
    offloaded = sum(sizes.get(n, 0) for n in r.offloaded)
    return float(device), float(offloaded)


def kind_of(m: ModelDims, args: Mapping[str, str]) -> str:
    """The kind of configuration the measured error is kept by."""
    what = "mixture of experts" if m.num_experts > 1 else "dense"
    r = remat_of(args)
    if r.offloads or _true(args, "optimizer_memory_host_offload") or _true(args, "parameter_memory_host_offload"):
        return f"{what}, host offload"
    return what


def features(m: ModelDims, per_device_batch: float, seq: int, totals: Mapping[str, int], args: Mapping[str, str]) -> dict[str, float]:
    """Bytes per device of each part at coefficient 1 (``state`` is exact: it is not fitted)."""
    tokens = per_device_batch * seq
    held = weight_bytes_per_device(m, totals)
    opt = args.get("opt_type", "adamw").strip().lower()
    moments = 0 if _true(args, "optimizer_memory_host_offload") or opt == "sgd" else 8
    device, offloaded = _saved_per_token(m, args)
    layers = m.base_num_decoder_layers
    moe, dense = m.layer_counts()
    k = min(m.num_experts, m.num_experts_per_tok)
    dense_width = (m.dense_mlp_dim or m.base_mlp_dim) if dense else 0
    expert_width = k * m.base_mlp_dim + m.shared_experts * (m.shared_mlp_dim or m.base_mlp_dim) if moe else 0
    tensor = totals.get("tensor", 1)
    return {
        "state": held * ((0 if _true(args, "parameter_memory_host_offload") else 4) + moments),
        "gradients": held,
        "saved": 2 * tokens * layers * device,
        "offload_staging": 2 * tokens * offloaded,
        "working_mlp": 2 * tokens * max(dense_width, expert_width),
        "working_embed": 2 * tokens * m.base_emb_dim,
        # a layer's weights gathered from their FSDP shards: every expert of it (the tokens may route to any)
        "working_weights": 2 * (m.attention_params() + m.mlp_params()) / layers / (tensor * totals.get("expert", 1)),
        "logits": 2 * tokens * m.vocab_size / _tiles(args),
        "vocab_tables": 2 * m.vocab_size * m.base_emb_dim / tensor,
    }


# Which part of the estimate each feature is reported under.
PART_OF = {
    "state": "state",
    "gradients": "gradients",
    "saved": "saved",
    "offload_staging": "saved",
    "working_mlp": "working",
    "working_embed": "working",
    "working_weights": "working",
    "logits": "logits",
    "vocab_tables": "logits",
}


def estimate_hbm(
    m: ModelDims, per_device_batch: float, seq: int, totals: Mapping[str, int], hbm_per_device: int, args: Mapping[str, str], coef: Coefficients = FITTED
) -> HbmEstimate:
    """``args``: the run's MaxText keys as text (recipe args with --set over them)."""
    parts: dict[str, float] = {}
    for name, b in features(m, per_device_batch, seq, totals, args).items():
        parts[PART_OF[name]] = parts.get(PART_OF[name], 0.0) + b * (EXACT[name] if name in EXACT else getattr(coef, name))
    kind = kind_of(m, args)
    error = HBM_ERROR.get(kind)
    return HbmEstimate(
        parts_bytes=tuple((name, int(b)) for name, b in parts.items()),
        available_bytes=hbm_per_device,
        kind=kind,
        error=error or UNMEASURED,
        measured=error is not None,
    )
