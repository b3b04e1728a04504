"""Regenerate workloads/recipes/_maxtext_models.yaml from the pinned MaxText wheel.

``import-recipe`` turns ``model_name=<preset>`` into the dimensions the planner checks
sharding and memory against; they come from MaxText's own configs/models/*.yml (over
base.yml's defaults), read once here so importing needs no MaxText install.

    $V/bin/python scripts/gen_maxtext_models.py [SITE_PACKAGES_MAXTEXT_DIR]

Default directory: the project's pinned MaxText venv (scripts/setup-maxtext.sh).
Mixture-of-experts presets count the routed MLP (base_moe_mlp_dim) once per routed expert and
record num_experts_per_tok and shared_experts (the step-time estimate counts the parameters a
token is active in), the layers without experts (deepseek3's first dense layers, llama4's
interleaved ones) and the dense and shared-expert widths; multi-head latent attention keeps its
low ranks, and local attention its window and local:global pattern, so that parameters and
FLOPs follow what MaxText builds (``ModelDims``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "workloads" / "recipes" / "_maxtext_models.yaml"


def _maxtext_dir() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    venv = subprocess.run(["bash", str(REPO / "scripts/setup-maxtext.sh")], check=True, capture_output=True, text=True).stdout.split()[-1]
    return next(Path(venv).glob("lib/python3*/site-packages/maxtext"))


# Local:global attention by decoder block (MaxText's layer patterns): every Nth layer global.
_GLOBAL_EVERY = {"gemma2": 2, "gemma3": 6, "gemma4": 6, "gpt_oss": 2}
_GEMMA4_SMALL_GLOBAL_EVERY = {"gemma4-e2b": 5}  # the other small gemma4s repeat 5 sliding + 1 global
# Decoder blocks MaxText scans (and rematerializes) several layers at a time: gemma3 and gemma4 by
# their attention pattern (models/gemma3.py, gemma4.py: 5 local + 1 global), the "scannable block"
# ones (layers/nnx_decoders.py get_scannable) by inhomogeneous_layer_cycle_interval.
_PATTERN_BLOCK = {"gemma3": 6, "gemma4": 6}
_CYCLE_BLOCK = ("gpt_oss", "qwen3_next", "qwen3_5", "llama4", "olmo3", "deepseek4")


def _dims(name: str, base: dict, preset: dict) -> dict | None:
    c = {**base, **preset}
    heads = c["base_num_query_heads"]
    mla = c.get("attention_type") == "mla"
    head_dim = c.get("qk_nope_head_dim", 0) + c.get("qk_rope_head_dim", 0) if mla else c["head_dim"]
    experts = int(c.get("num_experts", 1))
    moe = experts > 1 and int(c.get("base_moe_mlp_dim", -1)) > 0
    block = str(c.get("decoder_block", ""))
    dims = {
        "base_emb_dim": c["base_emb_dim"],
        "base_num_query_heads": heads,
        "base_num_kv_heads": c["base_num_kv_heads"],
        "head_dim": head_dim or c["head_dim"],
        "base_num_decoder_layers": c["base_num_decoder_layers"],
        "base_mlp_dim": c["base_moe_mlp_dim"] if moe else c["base_mlp_dim"],
        "vocab_size": c["vocab_size"],
        "mlp_matrices": 3 if len(c.get("mlp_activations", [])) > 1 else 2,
        "tied_embedding": bool(c.get("logits_via_embedding", False)),
        "position_embeddings": max(0, int(c.get("trainable_position_size", -1))),
        "num_experts": experts,  # routed only: expert parallelism splits these
        # What one token runs through: the step-time estimate counts active parameters.
        "num_experts_per_tok": int(c.get("num_experts_per_tok", 1)) if moe else 1,
        "shared_experts": int(c.get("shared_experts", 0) or 0) if moe else 0,
        "max_target_length": c["max_target_length"],
    }
    if moe:  # the layers without experts, and the widths of the dense MLPs beside them
        if block == "deepseek":
            dims["first_dense_layers"] = int(c.get("first_num_dense_layers", 0) or 0)
        if block == "llama4":
            dims["moe_every"] = max(1, int(c.get("interleave_moe_layer_step", 1) or 1))
        if dims.get("first_dense_layers") or dims.get("moe_every", 1) > 1:
            dims["dense_mlp_dim"] = c["base_mlp_dim"]
        if block == "gemma4":  # MaxText's gemma4 shared expert is as wide as its dense MLP
            dims["shared_mlp_dim"] = c["base_mlp_dim"]
    if mla:
        dims.update(
            q_lora_rank=int(c.get("q_lora_rank", 0) or 0),
            kv_lora_rank=int(c["kv_lora_rank"]),
            qk_rope_head_dim=int(c["qk_rope_head_dim"]),
            v_head_dim=int(c["v_head_dim"]),
        )
    window = int(c.get("sliding_window_size", 0) or 0)
    every = _GEMMA4_SMALL_GLOBAL_EVERY.get(name, 6) if block == "gemma4_small" else _GLOBAL_EVERY.get(block, 0)
    if block == "llama4" and int(c.get("chunk_attn_window_size", 0) or 0) > 0:  # chunked layers, every Nth global (NoPE)
        window, every = int(c["chunk_attn_window_size"]), int(c.get("nope_layer_interval", 0) or 0)
    if window > 0 and every > 1:
        dims.update(sliding_window=window, global_every=every)
    if block in ("gemma4", "gemma4_small") and int(c.get("global_head_dim", 0) or 0) > 0:
        dims["global_head_dim"] = int(c["global_head_dim"])
        if int(c.get("global_num_kv_heads", 0) or 0) > 0:
            dims["global_kv_heads"] = int(c["global_num_kv_heads"])
    scan_block = _PATTERN_BLOCK.get(block) or (int(c.get("inhomogeneous_layer_cycle_interval", 1) or 1) if block in _CYCLE_BLOCK else 1)
    if scan_block > 1:
        dims["scan_block"] = scan_block
    if c.get("share_kv_projections") and not mla:
        dims["shared_kv"] = True
    for key in ("fused_qkv", "fused_mlp"):  # which names the remat policy finds (qkv_proj / mlpwi, or each projection's)
        if c.get(key):
            dims[key] = True
    # The biases and sinks MaxText's layers create (gpt3's layers always carry biases and LayerNorm's;
    # qwen2's output projection has none; deepseek3/4's and kimi-k2's router bias is a variable the
    # optimizer does not train: MoEBiasVar, not a parameter).
    gpt3 = block == "gpt3"
    flags = {
        "qkv_bias": gpt3 or bool(c.get("attention_bias")),
        "out_bias": gpt3 or (bool(c.get("attention_bias")) and block != "qwen2"),
        "mlp_bias": gpt3 or bool(c.get("mlp_bias")),
        "routed_bias": moe and bool(c.get("routed_bias")) and not name.startswith(("deepseek3", "deepseek4", "kimi-k2")),
        "attention_sinks": bool(c.get("attention_sink")),
        "norm_bias": gpt3,
    }
    dims.update({k: True for k, v in flags.items() if v})
    ints = [v for k, v in dims.items() if not isinstance(v, bool)]
    return dims if all(isinstance(v, int) and v >= 0 for v in ints) else None


def main() -> None:
    root = _maxtext_dir()
    base = yaml.safe_load((root / "configs/base.yml").read_text())
    # model_name=default: base.yml's own dimensions (an import that sets none of them runs these).
    models = {"default": _dims("default", base, {})}
    for path in sorted((root / "configs/models").glob("*.yml")):
        dims = _dims(path.stem, base, yaml.safe_load(path.read_text()) or {})
        if dims is not None:
            models[path.stem] = dims
    version = root.parent.glob("maxtext-*.dist-info")
    head = (
        "# MaxText model presets -> the dimensions the planner checks (generated by\n"
        "# scripts/gen_maxtext_models.py from the pinned wheel's configs/models/*.yml; do not edit).\n"
    )
    body = yaml.safe_dump({"maxtext_version": next(version).name.split("-")[1].removesuffix(".dist"), "models": models}, sort_keys=True)
    OUT.write_text(head + body)
    print(f"{OUT}: {len(models)} presets")


if __name__ == "__main__":
    main()
