"""What a MaxText remat policy keeps of each decoder layer for the backward pass, and where. Pure.

MaxText wraps every decoder layer in ``jax.checkpoint`` with a policy (``remat_policy``)
that names the layer's tensors to keep: on the device, offloaded to host memory, or
recomputed ("remat") in the backward pass. The names are MaxText's checkpoint names
(``decoder_layer_input``, ``query_proj``, ``context``, ``mlpwi_0``, ...); the named policies
are fixed sets of them (MaxText 0.2.5, ``layers/nnx_decoders.py``: ``minimal`` keeps every
projection's output, ``save_qkv_proj`` the query/key/value projections, ``full`` nothing),
and ``custom`` reads one key per name (``remat``, ``device`` or ``offload``; base.yml keeps
``decoder_layer_input`` on the device and recomputes the rest).

Both estimates read this one table: the HBM estimate counts what stays on the device
(``workloads.planning.hbm``), the step time what is computed twice (``workloads.planning.step_time``).
The layer's input is the scan's carry: whatever the policy, it is kept (on the device
unless ``custom`` offloads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROJECTIONS = ("query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")
QKV = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj")
# Named policies: (kept on the device, offloaded to host). "full" keeps nothing but the layer input.
POLICIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "full": ((), ()),
    "minimal": (PROJECTIONS, ()),
    "minimal_with_context": ((*PROJECTIONS, "context"), ()),
    "minimal_flash": ((*PROJECTIONS, "context"), ()),
    "save_dot_with_context_except_mlp": ((*QKV, "context", "out_proj"), ()),
    "save_dot_except_mlpwi": ((*QKV, "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": ((*QKV, "out_proj"), ()),
    "save_qkv_proj": (QKV, ()),
    "qkv_proj_offloaded": ((), ("query_proj", "value_proj", "key_proj", "kv_proj")),
    "minimal_offloaded": ((), PROJECTIONS),
    "save_out_proj": (("out_proj",), ()),
}
# The names ``custom`` reads (base.yml's defaults: the layer input on the device, the rest recomputed).
CUSTOM_NAMES = (
    "decoder_layer_input",
    "context",
    "mlpwi",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwo",
    "moe_mlpwi_0",
    "moe_mlpwi_1",
    "moe_mlpwo",
    "query_proj",
    "key_proj",
    "value_proj",
    "kv_proj",
    "qkv_proj",
    "out_proj",
    "mla_q",
    "mla_kv",
    "attention_out",
)


@dataclass(frozen=True)
class Remat:
    """Per decoder layer: the names kept on the device, those offloaded to host, and where the layer input goes."""

    policy: str
    device: frozenset[str]
    offloaded: frozenset[str]

    def kept(self, *names: str) -> bool:
        """Any of ``names`` survives to the backward pass (on the device or the host)."""
        return any(n in self.device or n in self.offloaded for n in names)

    @property
    def input_offloaded(self) -> bool:
        return "decoder_layer_input" in self.offloaded

    @property
    def offloads(self) -> bool:
        return bool(self.offloaded)

    def recomputed(self) -> frozenset[str]:
        """The forward parts the backward pass computes again: ``qkv``, ``attention``, ``out``, ``mlp_in``.

        A part is recomputed when a tensor the backward needs from it was neither kept nor
        offloaded: the query/key/value for attention's backward, the attention output for
        the output projection's, that projection's output for the MLP input, the MLP's
        first projections for its activation. The last projection's output feeds only the
        next layer's input (kept), so it is never recomputed.
        """
        parts = set()
        if not (self.kept("qkv_proj") or self.kept("query_proj") and self.kept("key_proj", "kv_proj") and self.kept("value_proj", "kv_proj")):
            parts.add("qkv")
        if not self.kept("context", "attention_out"):
            parts.add("attention")
        if not self.kept("out_proj"):
            parts.add("out")
        if not (self.kept("mlpwi") or self.kept("mlpwi_0") and self.kept("mlpwi_1")):
            parts.add("mlp_in")
        return frozenset(parts)


def remat_of(args: Mapping[str, str]) -> Remat:
    """The remat of a run with these MaxText args (text, recipe args with ``--set`` over them); an unknown policy counts as ``full``."""
    policy = args.get("remat_policy", "full")
    if policy == "custom":
        choice = {n: args.get(n, "device" if n == "decoder_layer_input" else "remat") for n in CUSTOM_NAMES}
        return Remat(policy, frozenset(n for n, c in choice.items() if c == "device"), frozenset(n for n, c in choice.items() if c == "offload"))
    device, offloaded = POLICIES.get(policy, ((), ()))
    return Remat(policy if policy in POLICIES else "full", frozenset(("decoder_layer_input", *device)), frozenset(offloaded))
