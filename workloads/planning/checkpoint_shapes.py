"""Does a MaxText checkpoint hold the parameters of this run's model? Shapes read from its metadata, checked. Pure over a reader.

``submit --load-parameters PATH`` (MaxText's ``load_parameters_path``) starts a run from the
parameters of a checkpoint: a converted Hugging Face model (``convert``) or another run's.
MaxText finds out that they do not fit only after the slices are provisioned and the
state is being restored; here it is found before anything is applied, from the files
Orbax (0.12, as the pinned MaxText 0.2.5 writes them) keeps beside the arrays, all JSON:

- ``<items>/_METADATA``: the tree of saved values (``tree_metadata``: one key per parameter);
  its absence means the path holds no checkpoint;
- ``<items>/array_metadatas/process_0``: each array's ``write_shape`` — the piece one device
  wrote, not the array's shape;
- ``<items>/_sharding``: each array's sharding (mesh axis sizes, partition spec), from which
  the whole shape follows: the piece times the mesh axes that split each dimension, and, for
  a replicated array, times the replicas along the dimension Orbax cut the shard at (``_whole``);
- ``<step>/_CHECKPOINT_METADATA``: MaxText's custom metadata, ``scan_layers`` among it
  (a scanned checkpoint stacks the layers on axis 1 and cannot be restored into an
  unscanned model, or the reverse).

What is compared (``expected``, from the plan's model dimensions, the names MaxText's
decoder gives its parameters): the token embedding (vocab x emb), the final norm, the
output layer when the embedding is not tied, and for every decoder layer the attention
kernels (heads, kv heads, head_dim) and a dense model's MLP kernels; with scanned layers
the layer count is axis 1 of each, unscanned it is the number of ``layers_N``. A parameter
of another model family's layout that is not in this table is not judged; the embedding
always is (every MaxText decoder has one).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.errors import FieldError
from toolkit.jsontext import load_json

METADATA = "_METADATA"
ARRAY_METADATA = "array_metadatas/process_0"
SHARDING = "_sharding"
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"  # one directory up: the step's
SCAN_AXIS = 1  # MaxText's param_scan_axis default: scanned layers stack on axis 1
DIMS = ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "head_dim", "base_num_decoder_layers", "base_mlp_dim", "vocab_size")
_LAYER = re.compile(r"^decoder\.layers_([0-9]+)\.")
# a file's name relative to the checkpoint's items directory ("../x": its step's) -> its bytes, None when there is no such file
Read = Callable[[str], "bytes | None"]
_PATH = re.compile(r"^(gs://[a-z0-9][a-z0-9._-]*(/[A-Za-z0-9._=+-]+)*/?|/[A-Za-z0-9._=+/-]*)$")


@dataclass(frozen=True)
class LoadParameters:
    """A run that starts from a checkpoint's parameters: where, and the model they must be (for the check before apply)."""

    path: str  # as MaxText is given it (load_parameters_path)
    model_name: str
    dims: tuple[tuple[str, int], ...]  # DIMS of the model as the run has it (the recipe's with --set)
    scan_layers: bool
    tied_embedding: bool = False
    dense: bool = True  # no mixture of experts: the MLP kernels are compared too
    gated: bool = True  # wi_0 and wi_1 (a gated MLP), else wi
    field: str = "--load-parameters"  # where the path came from: the flag, --set, or the recipe's args

    def dim(self, key: str) -> int:
        return dict(self.dims)[key]

    def describe(self) -> str:
        d = dict(self.dims)
        return (
            f"{self.model_name}: vocab {d['vocab_size']} x emb {d['base_emb_dim']}, {d['base_num_decoder_layers']} layers, "
            f"{d['base_num_query_heads']} heads ({d['base_num_kv_heads']} kv) x {d['head_dim']}, mlp {d['base_mlp_dim']}, "
            f"scan_layers={'true' if self.scan_layers else 'false'}"
        )


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a load_parameters_path MaxText is given, or None (gs://BUCKET/PATH or an absolute path)."""
    if not _PATH.fullmatch(path) or "/../" in f"{path}/" or "//" in path.removeprefix("gs://"):
        return f"{path[:200]!r} is neither gs://BUCKET/PATH nor an absolute path of plain segments"
    return None


def _layer_shape(shape: tuple[int, ...], scanned: bool, layers: int) -> tuple[int, ...]:
    return (*shape[:SCAN_AXIS], layers, *shape[SCAN_AXIS:]) if scanned else shape


def expected(lp: LoadParameters) -> dict[str, tuple[int, ...]]:
    """Parameter path (below ``params.params.``) -> the shape the run's model gives it."""
    emb, heads, kv, hd = lp.dim("base_emb_dim"), lp.dim("base_num_query_heads"), lp.dim("base_num_kv_heads"), lp.dim("head_dim")
    layers, mlp, vocab = lp.dim("base_num_decoder_layers"), lp.dim("base_mlp_dim"), lp.dim("vocab_size")
    out: dict[str, tuple[int, ...]] = {"token_embedder.embedding": (vocab, emb), "decoder.decoder_norm.scale": (emb,)}
    if not lp.tied_embedding:
        out["decoder.logits_dense.kernel"] = (emb, vocab)
    layer = {
        "self_attention.query.kernel": (emb, heads, hd),
        "self_attention.key.kernel": (emb, kv, hd),
        "self_attention.value.kernel": (emb, kv, hd),
        "self_attention.out.kernel": (heads, hd, emb),
    }
    if lp.dense:
        for w in ("wi_0", "wi_1") if lp.gated else ("wi",):
            layer[f"mlp.{w}.kernel"] = (emb, mlp)
        layer["mlp.wo.kernel"] = (mlp, emb)
    if lp.scan_layers:
        out.update({f"decoder.layers.{k}": _layer_shape(v, True, layers) for k, v in layer.items()})
    else:
        out.update({f"decoder.layers_{i}.{k}": v for i in range(layers) for k, v in layer.items()})
    return out


class MetadataError(ValueError):
    """The metadata files are not what Orbax writes (said in one line)."""


def _json(raw: bytes, name: str) -> Any:
    try:
        return load_json(raw, max_bytes=64 * 2**20)
    except ValueError as e:
        raise MetadataError(f"{name} is not JSON ({e})") from None


def param_name(key: str) -> str | None:
    """A saved array's name below ``params.params.`` (MaxText's TrainState: params -> params -> the model); None for any other value."""
    for prefix in ("params.params.", "params."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def saved_names(metadata: bytes) -> list[str]:
    """The parameters ``_METADATA`` lists (dotted names below ``params.params.``)."""
    doc = _json(metadata, METADATA)
    tree = doc.get("tree_metadata") if isinstance(doc, dict) else None
    if not isinstance(tree, dict):
        raise MetadataError(f"{METADATA} has no tree_metadata (not an Orbax PyTree checkpoint)")
    names = []
    for key in tree:
        parts = [p.strip(" '\"") for p in key.strip("()").split(",") if p.strip(" '\"")] if key.startswith("(") else key.split(".")
        name = param_name(".".join(parts))
        if name is not None:
            names.append(name)
    return names


def global_shapes(array_metadata: bytes, sharding: bytes | None) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each parameter's whole shape, as the shapes it can be (see ``_whole``): one, unless a replicated array leaves a doubt."""
    doc = _json(array_metadata, ARRAY_METADATA)
    items = doc.get("array_metadatas") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise MetadataError(f"{ARRAY_METADATA} has no array_metadatas")
    shard_specs: dict[str, Any] = {}
    if sharding is not None:
        raw = _json(sharding, SHARDING)
        for k, v in raw.items() if isinstance(raw, dict) else ():
            try:
                shard_specs[base64.b64decode(k).decode()] = load_json(v, max_bytes=2**20) if isinstance(v, str) else v
            except (ValueError, UnicodeDecodeError):
                continue
    out: dict[str, tuple[tuple[int, ...], ...]] = {}
    for it in items:
        meta = (it or {}).get("array_metadata") or {}
        key, shape = meta.get("param_name"), meta.get("write_shape")
        name = param_name(str(key)) if key else None
        if name is None or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            continue
        out[name] = _whole(tuple(shape), shard_specs.get(str(key)))
    return out


def _whole(written: tuple[int, ...], spec: Mapping[str, Any] | None) -> tuple[tuple[int, ...], ...]:
    """The whole shapes an array written in pieces of ``written`` can have, most likely first.

    A piece is a device's shard (each dimension split over the mesh axes its partition spec
    names), except when the array is replicated: Orbax then has each of the ``r`` replicas write
    a part of the shard, cut along the shard's first dimension divisible by ``r`` (its
    replica-parallel save, ``replica_slices.calculate_replica_parallel_axis_and_local_shape``).
    Which dimension that was cannot be read back, only narrowed: a dimension of the piece
    divisible by ``r`` would have been cut first, so the cut is at it or before it; with none
    divisible, no cut at all is possible too.
    """
    if not spec:
        return (written,)
    names, sizes = list(spec.get("axis_names") or []), [int(x) for x in spec.get("shape") or []]
    size_of = dict(zip(names, sizes, strict=False))
    parts = list(spec.get("partition_spec") or [])
    split = []
    for i in range(len(written)):
        axes = parts[i] if i < len(parts) else None
        axes = [axes] if isinstance(axes, str) else list(axes or [])
        split.append(math.prod(int(size_of.get(a, 1)) for a in axes))
    shard = tuple(d * k for d, k in zip(written, split, strict=True))
    replicas = math.prod(sizes) // max(1, math.prod(split)) if sizes else 1
    if replicas <= 1:
        return (shard,)
    out: list[tuple[int, ...]] = []
    for axis, d in enumerate(written):
        out.append(tuple(x * replicas if i == axis else x for i, x in enumerate(shard)))
        if d % replicas == 0:
            break
    else:
        out.append(shard)  # no dimension of the piece divisible by r: it may be the whole shard
    return tuple(out)


def scan_layers_of(checkpoint_metadata: bytes | None, names: list[str]) -> bool | None:
    """Whether the checkpoint's layers are scanned: MaxText's custom metadata says, else its names (``layers_N`` is unscanned)."""
    if checkpoint_metadata is not None:
        doc = _json(checkpoint_metadata, CHECKPOINT_METADATA)
        value = ((doc or {}).get("custom_metadata") or {}).get("scan_layers") if isinstance(doc, dict) else None
        if isinstance(value, bool):
            return value
    if any(_LAYER.match(n) for n in names):
        return False
    if any(n.startswith("decoder.layers.") for n in names):
        return True
    return None


def problems(lp: LoadParameters, shapes: Mapping[str, tuple[tuple[int, ...], ...]], scan_layers: bool | None) -> list[str]:
    """What does not match, one phrase each (empty: the checkpoint holds this model's parameters)."""
    if "token_embedder.embedding" not in shapes:
        return ["it holds no token_embedder.embedding (not a MaxText decoder's parameters)"]
    if scan_layers is not None and scan_layers != lp.scan_layers:
        said = "true" if scan_layers else "false"
        return [f"it was saved with scan_layers={said} and the run has scan_layers={'true' if lp.scan_layers else 'false'}"]
    out = []
    if not lp.scan_layers:
        found = {int(m.group(1)) for n in shapes if (m := _LAYER.match(n))}
        if found and len(found) != lp.dim("base_num_decoder_layers"):
            out.append(f"it has {len(found)} decoder layers and the model {lp.dim('base_num_decoder_layers')}")
    for name, shape in expected(lp).items():
        could = shapes.get(name)
        if could is not None and shape not in could:
            out.append(f"{name} is {' or '.join('x'.join(map(str, c)) for c in could)}, the model's is {'x'.join(map(str, shape))}")
    return out


@dataclass(frozen=True)
class Checked:
    path: str
    parameters: int  # arrays below params.params
    scan_layers: bool | None

    def line(self) -> str:
        return f"load parameters: {self.path} holds {self.parameters} parameter arrays of the run's model (shapes checked)"


def check(lp: LoadParameters, read: Read) -> Checked:
    """Refuse a path that holds no checkpoint of this model (see the module docstring); what was found otherwise."""
    path, field = lp.path.rstrip("/"), lp.field
    metadata = read(METADATA)
    if metadata is None:
        for below in ("0/items", "items"):
            if read(f"{below}/{METADATA}") is not None:
                raise FieldError(field, f"{path} is the directory above the checkpoint's parameters", f"pass {path}/{below}")
        raise FieldError(
            field,
            f"no MaxText checkpoint at {path} (no {METADATA})",
            "pass the items directory of a checkpoint: what `convert` printed, or <output>/<run>/checkpoints/<step>/items",
        )
    try:
        names = saved_names(metadata)
        array_metadata = read(ARRAY_METADATA)
        if array_metadata is None:
            raise MetadataError(f"no {ARRAY_METADATA} (written by an Orbax older than the pinned MaxText's)")
        shapes = global_shapes(array_metadata, read(SHARDING))
        scanned = scan_layers_of(read(f"../{CHECKPOINT_METADATA}"), names)
    except MetadataError as e:
        raise FieldError(field, f"{path} is not a checkpoint the pinned MaxText reads: {e}", "convert the weights again with `convert`") from None
    wrong = problems(lp, shapes, scanned)
    if wrong:
        fix = (
            f"pass --set scan_layers={'true' if scanned else 'false'} (the checkpoint's layout)"
            if wrong[0].startswith("it was saved with scan_layers")
            else "convert the weights of this recipe's model (`convert RECIPE`), or pick the recipe whose model they are"
        )
        raise FieldError(field, f"{path} does not hold the run's model ({lp.describe()}): {'; '.join(wrong[:3])}", fix)
    return Checked(path, len(names), scanned)
