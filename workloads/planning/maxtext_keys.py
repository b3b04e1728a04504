"""The pinned MaxText's keys, as tables: which exist, which take numbers, and which the toolkit owns.

- ``maxtext_keys()``: every key of MaxText's ``base.yml`` (``workloads/recipes/_maxtext_keys.yaml``,
  written from the pinned version, ``images.MAXTEXT_VERSION``); a recipe or ``--set`` on the
  pinned image may use only these.
- ``numeric_keys()``: the keys whose default is a number (``_maxtext_numbers.yaml``); their
  values are held to ``maxtext_numbers.number_problem``.
- ``MESH_AXES`` and ``mesh_key``: the mesh, one ``ici_<axis>_parallelism`` (inside a slice)
  and one ``dcn_<axis>_parallelism`` (across slices) per axis.
- ``MODEL_KEYS``: the dimensions the planner sizes a model by (``ModelDims``); ``PLANNER_KEYS``:
  the keys the planner writes itself (the run's name, steps and topology).
- ``secret_keys()``: the keys that hold a credential (``hf_access_token``), never given a plain
  value (``program_text``); ``secret_env_name(key)``: the environment variable MaxText reads it from.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from toolkit.yamlfile import load_yaml

# Beside the shipped recipes (workloads/recipes/), as data files: a leading "_" keeps them out of the recipe list.
MAXTEXT_KEYS_FILE = Path(__file__).resolve().parent.parent / "recipes" / "_maxtext_keys.yaml"
MAXTEXT_NUMBERS_FILE = MAXTEXT_KEYS_FILE.with_name("_maxtext_numbers.yaml")  # the keys whose default is a number

# The axes of MaxText 0.2.5's parallelism keys, in base.yml order: every one exists both as
# ici_<axis>_parallelism (inside a slice) and dcn_<axis>_parallelism (across slices). The mesh
# MaxText builds from them has its own order and names (device_mesh.MAXTEXT_MESH_AXES: pipeline
# is its stage axis, and sequence has no axis there).
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

# The MaxText keys ModelDims mirrors; a --set on one of them changes the model.
MODEL_KEYS = frozenset(["base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "head_dim", "base_num_decoder_layers", "base_mlp_dim", "vocab_size"])
# The presets' structure (ModelDims' other fields, by MaxText key -> field): a --set on one changes the
# model the estimates size, and the minimum each may take (0: "this model has none").
STRUCTURE_KEYS: dict[str, tuple[str, int]] = {
    "num_experts": ("num_experts", 1),
    "num_experts_per_tok": ("num_experts_per_tok", 1),
    "shared_experts": ("shared_experts", 0),
    "base_moe_mlp_dim": ("base_mlp_dim", 1),  # a mixture of experts' base_mlp_dim is its experts' width
    "first_num_dense_layers": ("first_dense_layers", 0),
    "interleave_moe_layer_step": ("moe_every", 1),
    "q_lora_rank": ("q_lora_rank", 0),
    "kv_lora_rank": ("kv_lora_rank", 0),
    "qk_rope_head_dim": ("qk_rope_head_dim", 0),
    "v_head_dim": ("v_head_dim", 0),
    "sliding_window_size": ("sliding_window", 0),
}
# Other keys the estimates read as integers of at least 1.
ESTIMATE_KEYS = frozenset(["num_vocab_tiling"])

# Keys the planner owns: setting them through a recipe or --set would make the
# run disagree with its JobSet name, its bucket path or its step count.
PLANNER_KEYS = frozenset(["run_name", "steps", "hardware", "num_slices", "compile_topology", "compile_topology_num_slices"])


def mesh_key(key: str) -> tuple[str, str] | None:
    """('ici'|'dcn', axis) for a mesh key such as ici_fsdp_parallelism."""
    for level in ("ici", "dcn"):
        prefix = f"{level}_"
        if key.startswith(prefix) and key.endswith("_parallelism"):
            return level, key[len(prefix) : -len("_parallelism")]
    return None


@lru_cache(maxsize=1)
def maxtext_keys() -> frozenset[str]:
    return frozenset(load_yaml(MAXTEXT_KEYS_FILE.read_text())["keys"])


@lru_cache(maxsize=1)
def numeric_keys() -> frozenset[str]:
    """The MaxText keys that take a number (their base.yml default is one): their values are held to ``number_problem``."""
    return frozenset(load_yaml(MAXTEXT_NUMBERS_FILE.read_text())["numeric"])


@lru_cache(maxsize=1)
def secret_keys() -> frozenset[str]:
    """The MaxText keys that hold a credential (``_maxtext_keys.yaml``'s ``secret_keys``)."""
    return frozenset(load_yaml(MAXTEXT_KEYS_FILE.read_text())["secret_keys"])


# MaxText 0.2.5 reads hf_access_token from HF_TOKEN when it is not set (pyconfig._resolve_or_infer_addl_config),
# and any key from M_<KEY> (pyconfig's environment overrides, _MAX_PREFIX).
_SECRET_ENV = {"hf_access_token": "HF_TOKEN"}


def secret_env_name(key: str) -> str:
    """The environment variable MaxText reads ``key`` from (the name a ``--secret-env`` should give)."""
    return _SECRET_ENV.get(key, f"M_{key.upper()}")
