"""HBM per device of a MaxText training step: what XLA allocates for it, part by part. Pure.

The compiled step (``workloads.maxtext.aot``: arguments + outputs - aliased + temporaries)
holds, per device:

    state        the train state, donated in and out: fp32 weights (4 B a parameter) and
                 Adam's two moments (8 B), each weight split by the mesh axes MaxText
                 shards it over (``mesh.weight_dims``) and padded to TPU's memory tiles
                 (``tpu_elements``), with the biases, sinks and norms beside the matrices,
                 mostly whole on every device (``small_params_per_device``); the moments
                 on the host with optimizer_memory_host_offload
    gradients    fp32, shaped like the weights (4 B), and the bf16 copy of the weights the
                 layers compute with (2 B)
    saved        what the remat policy keeps of every layer for the backward pass
                 (``workloads.planning.remat``): each scanned unit's input, and each kept
                 projection of every layer, in bf16 per token; what it offloads lives in host memory
    working      one scanned unit's forward and backward in flight (a layer; a block of
                 ``scan_block`` layers where MaxText scans several as one, gemma3's six or
                 gpt-oss's two: the block is rematerialized whole): its MLP (or routed experts')
                 activations, in a mixture of experts each token's copies for its experts
                 (tokens x experts per token x embedding), the weights gathered from
                 their FSDP shards (the layer's, every expert of it, and the output layer's
                 vocabulary table), and Adam's moments brought in from the host for the
                 update when optimizer_memory_host_offload keeps them there
    logits       the output layer's logits and their gradient (bf16, tokens x vocabulary /
                 num_vocab_tiling)

Tokens per device are ``per_device_batch_size x max_target_length`` (a split over tensor,
sequence or context moves tokens and widths between devices, not bytes). How many buffers of
each kind XLA keeps at once, and its packing of them, are the coefficients below: fitted to
the compiled matrix of ``scripts/bench_hbm_calibration.py`` (MaxText 0.2.5, libtpu 0.0.52),
whose residual per kind of configuration is ``HBM_ERROR`` (compiled / estimated, least and
most).

The compiled figures are what XLA allocates when it has the room: under pressure it
rematerializes working sets and stages less (the same llama3-8b run with Adam's moments on the
host took 8.75 GiB of temporaries on a 32 GiB v6e and 6.67 on a 16 GiB v5e; published Ironwood
recipes run at batches whose full estimate is over the device). So a plan is refused only when
the floor is over the device's HBM (``HbmEstimate.floor_bytes``: the exact parts and one copy of
the logits, which no schedule gives back), and warned when the estimate's measured range
reaches over it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
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

    offload_staging: float  # x one layer of what the policy offloads, in flight on the device
    working_mlp: float  # x tokens x MLP width (routed: experts per token) x 2 B
    working_routed: float  # x tokens x experts per token x embedding x 2 B: the routed copies of each token
    working_weights: float  # x one layer's weights and the output layer's table gathered, bf16
    optimizer_staging: float  # x Adam's moments (8 B a parameter held) when they live on the host: brought in for the update
    logits: float  # x tokens x vocabulary x 2 B / num_vocab_tiling


# Fitted (workloads.planning.hbm_fit) to the configurations MaxText 0.2.5 compiled in
# scripts/hbm_calibration_results.json; `python scripts/bench_hbm_calibration.py --from-results
# scripts/hbm_calibration_results.json` prints the fit again, and tests/test_hbm.py holds these to it.
FITTED = Coefficients(offload_staging=0.871, working_mlp=6.022, working_routed=4.06, working_weights=0.545, optimizer_staging=0.221, logits=1.706)

# compiled / estimated, least and most, per kind of configuration, each configuration estimated by
# coefficients fitted without it (the same bench and results file).
HBM_ERROR: dict[str, tuple[float, float]] = {
    "dense": (0.862, 1.137),
    "dense, host offload": (0.88, 1.265),
    "mixture of experts": (0.884, 1.127),
    "mixture of experts, host offload": (0.874, 1.213),
}
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


def _sharder(m: ModelDims, totals: Mapping[str, int]) -> Callable[[str], int]:
    """What each weight dimension of ``m`` is split into (by its ``weight_dims`` name; 1 for a dimension the model lacks)."""
    dims = {w.what: w for w in weight_dims(m)}

    def sh(what: str) -> int:
        return _shards(totals, dims[what].axes, dims[what].size) if what in dims else 1

    return sh


def _round(n: int, to: int) -> int:
    return -(-n // to) * to


def tpu_elements(shape: tuple[int, ...]) -> int:
    """Elements one device's fp32 array takes in HBM: TPU's tiled layout, padding included.

    TPU memory holds an array in tiles over its two minor dimensions: 128 wide, 8 rows deep (1, 2
    or 4 rows when the second-minor dimension is that small); a 1-D array in tiles of 1024 (of 128
    when it is no longer than 1024). For each array of the train state XLA picks the two
    dimensions that pad least (its layout's major_to_minor is not the array's order). A dimension
    of 128s costs nothing, but a shard with none does: gpt-oss-20b's query kernel on 16 fsdp
    shards is (180, layers, 64 heads, 64 head dim) per device, and its least padding is 180 -> 256
    (+42 %); its expert kernels' 2880 pads to 2944 (+2.2 %). Checked against the bytes XLA gives
    each array of MaxText 0.2.5's abstract train state as a jit argument (libtpu 0.0.52; the
    figures are in tests/test_hbm.py).
    """
    dims = [max(1, d) for d in shape]
    if not dims:
        return 1
    if len(dims) == 1:
        return _round(dims[0], 128 if dims[0] <= 1024 else 1024)

    def rows(n: int) -> int:
        return 1 << (n - 1).bit_length() if n < 8 else _round(n, 8)

    total = math.prod(dims)
    return min(total // (dims[i] * dims[j]) * _round(dims[i], 128) * rows(dims[j]) for i in range(len(dims)) for j in range(len(dims)) if i != j)


def _padding(arrays: list[tuple[int, ...]]) -> float:
    """HBM / elements of a group of arrays: what their tiled layout adds (1.0: none)."""
    elements = sum(math.prod(a) for a in arrays)
    return sum(tpu_elements(a) for a in arrays) / elements if elements else 1.0


def _stack(m: ModelDims, layers: int, args: Mapping[str, str]) -> int:
    """The layer axis of a weight MaxText scans (scan_layers, its default): the layers of one
    repeating block in the stack (gpt-oss and gemma scan their local:global cycle as one block,
    each of its layers a stack of layers / cycle); 1 when the layers are not scanned."""
    if args.get("scan_layers", "true").strip().lower() == "false":
        return 1
    cycle = m.global_every if m.sliding_window and m.global_every > 1 else 1
    return max(1, layers // cycle)


def weight_bytes_per_device(m: ModelDims, totals: Mapping[str, int], args: Mapping[str, str] | None = None) -> float:
    """Parameters held per device (a count, not bytes, of fp32 elements in HBM): each weight class
    over the mesh axes of its dimensions, with the padding of TPU's tiled layout (``tpu_elements``),
    and the biases, sinks and norms beside the matrices (``small_params_per_device``)."""
    args = args or {}
    sh = _sharder(m, totals)

    def split(*whats: str) -> int:
        return math.prod(sh(w) for w in whats)

    embed_attn = "the embedding dimension of the attention and embedding weights"
    embed_mlp = "the embedding dimension of the MLP weights"
    moe, dense = m.layer_counts()
    e = m.base_emb_dim // sh(embed_attn)
    s = _stack(m, m.base_num_decoder_layers, args)
    h = m.base_num_query_heads // sh("the query heads")
    # Each class's arrays as one device holds them (the scanned layer axis among their dimensions):
    # their layout's padding multiplies the class's parameters. Latent attention's low-rank arrays
    # are not modelled array by array (their ranks are multiples of 128 in every preset).
    if m.mla:
        attention_pad = 1.0
    else:
        kv = m.base_num_kv_heads // sh("the key/value heads")
        if m.fused_qkv:
            arrays = [(e, s, 3, h, m.head_dim)]
        else:
            arrays = [(e, s, h, m.head_dim)] + [(e, s, kv, m.head_dim)] * (1 if m.shared_kv else 2)
        attention_pad = _padding([*arrays, (h, s, m.head_dim, e)])
    attention = m.attention_params() * attention_pad / split(embed_attn, "the query heads")
    vocab = m.vocab_size // sh("the vocabulary")
    table = [(vocab, e)] * (1 if m.tied_embedding else 2) + ([(m.position_embeddings, e)] if m.position_embeddings else [])
    embedding = m.embedding_params() * _padding(table) / split(embed_attn, "the vocabulary")

    def dense_mlp(layers: int) -> float:
        em, f = m.base_emb_dim // sh(embed_mlp), (m.dense_mlp_dim or m.base_mlp_dim) // sh("the MLP dimension")
        st = _stack(m, layers, args)
        return _padding([(em, st, f)] * (m.mlp_matrices - 1) + [(f, st, em)])

    if m.num_experts == 1:
        mlp = m.mlp_params() * dense_mlp(dense) / split(embed_mlp, "the MLP dimension")
    else:
        routed = m.mlp_params() - m.mlp_params(0)
        ex = m.num_experts // sh("the experts")
        ee = m.base_emb_dim // sh("the embedding dimension of the expert weights")
        ef = m.base_mlp_dim // sh("the experts' MLP dimension")
        st = _stack(m, moe, args)
        expert_pad = _padding([(ex, st, ee, ef)] * (m.mlp_matrices - 1) + [(ex, st, ef, ee)])
        mlp = routed * expert_pad / split("the experts", "the experts' MLP dimension", "the embedding dimension of the expert weights")
        mlp += m.mlp_params(0) * dense_mlp(dense) / split(embed_mlp, "the MLP dimension") if dense else m.mlp_params(0) / split(embed_attn)
    return attention + embedding + mlp + small_params_per_device(m, totals, args)


def small_params_per_device(m: ModelDims, totals: Mapping[str, int], args: Mapping[str, str] | None = None) -> float:
    """The parameters beside the weight matrices, per device with their layout's padding.

    Each is split only by what its own logical axis maps to (MaxText 0.2.5's logical_axis_rules):
    a norm's scale (and gpt3's bias) by ``norm`` -> tensor, a query/key/value bias by its heads ->
    tensor, an output or down-projection bias by ``embed`` like its kernel, an up-projection bias
    by ``mlp``, an expert's biases by ``exp`` -> expert and their width by the activation axes
    (``activation_mlp`` -> tensor x tensor_sequence, ``activation_embed`` -> tensor), attention
    sinks not at all. On an fsdp mesh most are whole on every device: gpt3-6b's on 64
    devices are 1.8 % of its state, where the matrices are split 64 ways.
    """
    args = args or {}
    sh = _sharder(m, totals)
    layers = m.base_num_decoder_layers
    moe, dense = m.layer_counts()
    e = m.base_emb_dim // sh("the embedding dimension of the attention and embedding weights")
    tensor = _shards(totals, ("tensor",), m.base_emb_dim)
    s = _stack(m, layers, args)
    per_stack = layers // s  # arrays of the layer axis s, one per layer of the repeating block
    arrays: list[tuple[int, ...]] = []
    # Every decoder layer normalizes before attention and before its MLP; the decoder once at the end.
    norm = (m.base_emb_dim // tensor,)
    arrays += [(*norm, s)] * (2 * per_stack * (2 if m.norm_bias else 1)) + [norm] * (2 if m.norm_bias else 1)
    if m.qkv_bias and not m.mla:
        h = m.base_num_query_heads // sh("the query heads")
        kv = m.base_num_kv_heads // sh("the key/value heads")
        arrays += [(3, s, h, m.head_dim)] * per_stack if m.fused_qkv else [(h, s, m.head_dim), (kv, s, m.head_dim), (kv, s, m.head_dim)] * per_stack
    if m.out_bias:
        arrays += [(e, s)] * per_stack
    if m.attention_sinks:
        arrays += [(m.base_num_query_heads, s)] * per_stack
    if m.mlp_bias and dense and m.num_experts == 1:
        f = m.base_mlp_dim // sh("the MLP dimension")
        em = m.base_emb_dim // sh("the embedding dimension of the MLP weights")
        arrays += [(f, s)] * ((m.mlp_matrices - 1) * per_stack) + [(em, s)] * per_stack
    if moe:
        ex = m.num_experts // sh("the experts")
        st = _stack(m, moe, args)
        blocks = moe // st
        if m.mlp_bias:
            ef = m.base_mlp_dim // _shards(totals, ("tensor", "tensor_sequence"), m.base_mlp_dim)
            arrays += [(ex, st, ef)] * ((m.mlp_matrices - 1) * blocks) + [(ex, st, m.base_emb_dim // tensor)] * blocks
        if m.routed_bias:
            arrays += [(ex, st)] * blocks
    return float(sum(tpu_elements(a) for a in arrays))


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
    # The layer input is the scanned unit's: a block of scan_block layers keeps one, its first layer's.
    units, _ = m.scan_units()
    per_layer = {**sizes, "decoder_layer_input": sizes["decoder_layer_input"] * units / layers}
    device = sum(per_layer.get(n, 0) for n in r.device)
    offloaded = sum(per_layer.get(n, 0) for n in r.offloaded)
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
    held = weight_bytes_per_device(m, totals, args)
    opt = args.get("opt_type", "adamw").strip().lower()
    moments = 0 if _true(args, "optimizer_memory_host_offload") or opt == "sgd" else 8
    device, offloaded = _saved_per_token(m, args)
    layers = m.base_num_decoder_layers
    moe, dense = m.layer_counts()
    k = min(m.num_experts, m.num_experts_per_tok)
    dense_width = (m.dense_mlp_dim or m.base_mlp_dim) if dense else 0
    expert_width = k * m.base_mlp_dim + m.shared_experts * (m.shared_mlp_dim or m.base_mlp_dim) if moe else 0
    tensor = totals.get("tensor", 1)
    # A block of layers scanned as one unit is rematerialized as one: its layers' activations and
    # gathered weights are in flight together in the backward pass.
    _, block = m.scan_units()
    return {
        "state": held * ((0 if _true(args, "parameter_memory_host_offload") else 4) + moments),
        "gradients": held,
        "saved": 2 * tokens * layers * device,
        "offload_staging": 2 * tokens * offloaded * block,
        "working_mlp": 2 * tokens * max(dense_width, expert_width) * block,
        # An expert layer sends each token to k experts: its copies, sorted by expert, and the experts'
        # outputs before they are combined are tokens x k x embedding wide (wider than the routed MLP
        # when the experts are narrow: 8 of 128 experts of width 768 on a 2048 embedding).
        "working_routed": 2 * tokens * k * m.base_emb_dim * block if moe else 0.0,
        # Weights gathered from their FSDP shards for a layer in flight (every expert of it: the tokens
        # may route to any) and for the output layer (its vocabulary x embedding table); the gradient of
        # each, full size until it is reduce-scattered, goes with it.
        "working_weights": 2 * ((m.attention_params() + m.mlp_params()) * block / layers / totals.get("expert", 1) + m.vocab_size * m.base_emb_dim) / tensor,
        "logits": 2 * tokens * m.vocab_size / _tiles(args),
        # Moments kept in host memory are updated on the device: XLA brings them in for the update.
        "optimizer_staging": held * 8 if _true(args, "optimizer_memory_host_offload") and moments == 0 and opt != "sgd" else 0.0,
    }


# Which part of the estimate each feature is reported under.
PART_OF = {
    "state": "state",
    "gradients": "gradients",
    "saved": "saved",
    "offload_staging": "saved",
    "working_mlp": "working",
    "working_routed": "working",
    "optimizer_staging": "working",
    "working_weights": "working",
    "logits": "logits",
}


def estimate_hbm(
    m: ModelDims, per_device_batch: float, seq: int, totals: Mapping[str, int], hbm_per_device: int, args: Mapping[str, str], coef: Coefficients = FITTED
) -> HbmEstimate:
    """``args``: the run's MaxText keys as text (recipe args with --set over them)."""
    parts: dict[str, float] = {}
    f = features(m, per_device_batch, seq, totals, args)
    for name, b in f.items():
        parts[PART_OF[name]] = parts.get(PART_OF[name], 0.0) + b * (EXACT[name] if name in EXACT else getattr(coef, name))
    floor = sum(f[n] * c for n, c in EXACT.items()) + f["logits"]
    kind = kind_of(m, args)
    error = HBM_ERROR.get(kind)
    return HbmEstimate(
        parts_bytes=tuple((name, int(b)) for name, b in parts.items()),
        available_bytes=hbm_per_device,
        kind=kind,
        error=error or UNMEASURED,
        measured=error is not None,
        floor_bytes=int(floor),
    )
