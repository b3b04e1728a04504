"""Write a tiny Llama in Hugging Face's layout (model.safetensors + config.json); run with the MaxText venv's python.

    python write_hf_llama.py OUT --vocab 256 --layers 2 --emb 64 --heads 4 --kv-heads 4 --head-dim 16 --mlp 128 --scale 1.0 --seed 0

The tensor names and shapes are LlamaForCausalLM's (``model.layers.N.self_attn.q_proj.weight``
is heads*head_dim x hidden, as transformers stores a Linear: out x in). ``--scale`` is the
standard deviation of the weights: large enough, and the first loss of a run that loads them
is far above a freshly initialised model's (which starts near ln(vocab)).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    for k, v in (("vocab", 256), ("layers", 2), ("emb", 64), ("heads", 4), ("kv-heads", 4), ("head-dim", 16), ("mlp", 128), ("seed", 0)):
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * a.scale).astype(np.float32)

    t = {"model.embed_tokens.weight": w(a.vocab, a.emb), "lm_head.weight": w(a.vocab, a.emb), "model.norm.weight": np.ones(a.emb, np.float32)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = w(a.heads * a.head_dim, a.emb)
        t[p + "self_attn.k_proj.weight"] = w(a.kv_heads * a.head_dim, a.emb)
        t[p + "self_attn.v_proj.weight"] = w(a.kv_heads * a.head_dim, a.emb)
        t[p + "self_attn.o_proj.weight"] = w(a.emb, a.heads * a.head_dim)
        t[p + "mlp.gate_proj.weight"] = w(a.mlp, a.emb)
        t[p + "mlp.up_proj.weight"] = w(a.mlp, a.emb)
        t[p + "mlp.down_proj.weight"] = w(a.emb, a.mlp)
        t[p + "input_layernorm.weight"] = np.ones(a.emb, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(a.emb, np.float32)
    a.out.mkdir(parents=True, exist_ok=True)
    save_file(t, str(a.out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": a.emb,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "num_hidden_layers": a.layers,
        "intermediate_size": a.mlp,
        "vocab_size": a.vocab,
        "torch_dtype": "float32",
    }
    (a.out / "config.json").write_text(json.dumps(config, indent=1))


if __name__ == "__main__":
    main()
