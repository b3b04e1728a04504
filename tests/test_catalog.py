"""The TPU catalog against the published facts: Cloud TPU's and GKE's documentation ("Plan TPUs
in GKE", https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus, and the per-generation
TPU pages), xpk's hardware table and the published tpu-recipes.

The expected values below are transcribed from those sources, not from catalog.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra import catalog
from infra.catalog import Placement
from toolkit.errors import CatalogError

GIB = 1024**3
GB = 10**9

# gen: (label, multi-host machine, devices/chip, HBM bytes/chip, peak bf16/chip, multi-host placement, dims)
GEN_FACTS = {
    "v4": ("tpu-v4-podslice", "ct4p-hightpu-4t", 1, 32 * GIB, 275, Placement.COMPACT, 3),
    "v5e": ("tpu-v5-lite-podslice", "ct5lp-hightpu-4t", 1, 16 * GB, 197, Placement.COMPACT, 2),
    "v5p": ("tpu-v5p-slice", "ct5p-hightpu-4t", 1, 95 * GIB, 459, Placement.COMPACT, 3),
    "v6e": ("tpu-v6e-slice", "ct6e-standard-4t", 1, 32 * GB, 918, Placement.COMPACT, 2),
    "tpu7x": ("tpu7x", "tpu7x-standard-4t", 2, 192 * GIB, 2307, Placement.WORKLOAD_POLICY, 3),
}
SINGLE_2D = {"1x1": ("1t", 1), "2x2": ("4t", 4), "2x4": ("8t", 8)}
SINGLE_MACHINE_PREFIX = {"v5e": "ct5lp-hightpu-", "v6e": "ct6e-standard-"}
MULTI_2D = {"2x4": 2, "4x4": 4, "4x8": 8, "8x8": 16, "8x16": 32, "16x16": 64}
MULTI_3D = {"2x2x2": 2, "2x2x4": 4, "2x4x4": 8, "4x4x4": 16, "4x4x8": 32, "4x8x8": 64, "8x8x8": 128}


def _cases():
    for gen, facts in GEN_FACTS.items():
        dims = facts[6]
        if dims == 2:
            for topo, (suffix, chips) in SINGLE_2D.items():
                yield gen, topo, chips, SINGLE_MACHINE_PREFIX[gen] + suffix, chips, 1
            for topo, nodes in MULTI_2D.items():
                yield gen, topo, 4, facts[1], nodes * 4, nodes
        else:
            yield gen, "2x2x1", 4, facts[1], 4, 1
            for topo, nodes in MULTI_3D.items():
                yield gen, topo, 4, facts[1], nodes * 4, nodes


CASES = list(_cases())


@pytest.mark.parametrize("gen,topo,cpv,machine,chips,nodes", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_valid_shape_resolves(gen, topo, cpv, machine, chips, nodes):
    label, _, dpc, hbm, peak, multi_placement, _ = GEN_FACTS[gen]
    s = catalog.shape(gen, topo, cpv)
    assert s.accelerator_label == label
    assert s.machine_type == machine
    assert s.chips_per_vm == cpv
    assert s.chips == chips
    assert s.nodes == nodes
    assert s.generation.devices_per_chip == dpc
    assert s.devices == chips * dpc
    assert abs(s.hbm_bytes_per_chip - hbm) <= hbm * 0.08  # GiB vs GB rounding in the sources
    assert s.peak_tflops_per_chip == peak
    assert s.multi_host is (nodes > 1)
    assert s.placement is (multi_placement if nodes > 1 else Placement.NONE)


def test_default_chips_per_vm_for_2x4_is_single_host():
    # v5litepod-8 / v6e-8 are one 8-chip VM; 2x4 from 4-chip VMs needs chips_per_vm: 4.
    assert catalog.shape("v6e", "2x4").machine_type == "ct6e-standard-8t"
    assert catalog.shape("v6e", "2x4", 4).nodes == 2


def test_tpu7x_device_facts():
    s = catalog.shape("tpu7x", "4x4x8")
    assert s.devices == 256 and s.chips_per_vm * s.generation.devices_per_chip == 8
    assert s.peak_tflops_per_device == pytest.approx(1153.5)
    assert s.generation.peak_fp8_tflops_per_chip == 4614
    assert s.placement is Placement.WORKLOAD_POLICY


@pytest.mark.parametrize(
    "name,gen,chips",
    [
        ("v5litepod-16", "v5e", 16),
        ("v5e-16", "v5e", 16),
        ("v6e-16", "v6e", 16),
        ("v4-16", "v4", 8),
        ("v5p-16", "v5p", 8),
        ("tpu7x-128", "tpu7x", 64),
        ("v4-8", "v4", 4),
        ("v5litepod-8", "v5e", 8),
        ("v6e-256", "v6e", 256),
        ("v5p-128", "v5p", 64),
        ("  V6E-16 ", "v6e", 16),
    ],
)
def test_accelerator_type_names(name, gen, chips):
    s = catalog.accelerator_type(name)
    assert s.generation.name == gen
    assert s.chips == chips
    assert math.prod(s.dims) == chips


def test_names_resolve_to_expected_topologies():
    assert catalog.accelerator_type("v5litepod-16").topology == "4x4"
    assert catalog.accelerator_type("v4-32").topology == "2x2x4"
    assert catalog.accelerator_type("tpu7x-128").topology == "4x4x4"
    assert catalog.accelerator_type("v5p-8").nodes == 1


@pytest.mark.parametrize(
    "call,must_mention",
    [
        (lambda: catalog.accelerator_type("v9-16"), "v5litepod-16"),
        (lambda: catalog.accelerator_type("v4-15"), "v4-16"),
        (lambda: catalog.accelerator_type("v5litepod-12"), "v5litepod-16"),
        (lambda: catalog.accelerator_type("v6e-512"), "v6e-256"),
        (lambda: catalog.shape("v5e", "2x2x4"), "4x4"),
        (lambda: catalog.shape("v4", "4x4"), "2x2x2"),
        (lambda: catalog.shape("v6e", "3x3"), "16x16"),
        (lambda: catalog.shape("v4", "4x4x6"), "4x4x8"),
        (lambda: catalog.shape("v5p", "8x4x4"), "4x4x8"),
        (lambda: catalog.shape("v6e", "4x4", 8), "ct6e-standard-4t"),
        (lambda: catalog.shape("v7", "4x4"), "tpu7x"),
        (lambda: catalog.shape("v6e", "4by4"), "4x4"),
        (lambda: catalog.resolve("v6e-16", generation="v6e", topology="4x8"), "16"),
        (lambda: catalog.resolve(), "v5litepod-16"),
    ],
)
def test_invalid_shapes_rejected_with_valid_ones_listed(call, must_mention):
    with pytest.raises(CatalogError) as ei:
        call()
    assert must_mention in str(ei.value)


def test_gke_version_floor():
    v5e = catalog.shape("v5e", "4x4")
    v6e = catalog.shape("v6e", "4x4")
    x7 = catalog.shape("tpu7x", "2x2x2")
    assert catalog.gke_version_floor([v5e], False) is None
    assert catalog.gke_version_floor([v5e], True) == "1.27.4-gke.900"
    assert catalog.gke_version_floor([v6e], True) == "1.31.2-gke.1115000"
    assert catalog.gke_version_floor([v5e, x7, v6e], True) == "1.34.0-gke.2201000"
    assert catalog.gke_version_tuple("1.34") < catalog.gke_version_tuple("1.34.0-gke.1")


# ------------------------------------------------------------------ properties

ALL_VALID = [(g, t) for g in catalog.GENERATIONS for t in catalog.valid_topologies(g)]


@st.composite
def valid_shapes(draw):
    gen, topo = draw(st.sampled_from(ALL_VALID))
    s = catalog.shape(gen, topo)
    # 2D 2x4 exists as both one 8-chip VM and two 4-chip VMs
    if gen in ("v5e", "v6e") and topo == "2x4" and draw(st.booleans()):
        s = catalog.shape(gen, topo, 4)
    return s


@settings(max_examples=300, deadline=None)
@given(valid_shapes())
def test_nodes_times_chips_per_vm_is_chips(s):
    assert s.nodes * s.chips_per_vm == s.chips
    assert s.devices == s.chips * s.generation.devices_per_chip
    assert (s.chips_per_vm == 4) or not s.multi_host


@settings(max_examples=300, deadline=None)
@given(valid_shapes())
def test_accelerator_type_round_trips(s):
    back = catalog.accelerator_type(s.accelerator_type)
    assert back.generation is s.generation
    assert back.chips == s.chips
    assert back.accelerator_type == s.accelerator_type
    # the name's topology is itself a valid shape of the same chip count
    again = catalog.shape(back.generation.name, back.topology, back.chips_per_vm)
    assert again == back


@pytest.mark.parametrize("gen,topo", ALL_VALID, ids=[f"{g}-{t}" for g, t in ALL_VALID])
def test_every_valid_topology_name_resolves_back(gen, topo):
    s = catalog.shape(gen, topo)
    named = catalog.accelerator_type(s.accelerator_type)
    assert named.chips == s.chips
    for prefix in s.generation.name_prefixes:
        count = s.chips * (2 if s.generation.name_counts_cores else 1)
        assert catalog.accelerator_type(f"{prefix}-{count}").chips == s.chips


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(sorted(catalog.GENERATIONS)),
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=4),
    st.sampled_from([None, 1, 4, 8, 3]),
)
def test_arbitrary_topologies_either_resolve_consistently_or_raise_catalog_error(gen, dims, cpv):
    topo = "x".join(map(str, dims))
    try:
        s = catalog.shape(gen, topo, cpv)
    except CatalogError as e:
        assert str(e)  # a message, never another exception type
        return
    assert s.topology in catalog.valid_topologies(gen) or s.generation.dims == 3
    assert s.nodes * s.chips_per_vm == s.chips
    assert s.chips <= s.generation.max_chips


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["v4", "v5litepod", "v5e", "v5p", "v6e", "tpu7x"]), st.integers(min_value=0, max_value=20000))
def test_arbitrary_names_resolve_with_matching_count_or_raise(prefix, n):
    try:
        s = catalog.accelerator_type(f"{prefix}-{n}")
    except CatalogError:
        return
    per = 2 if s.generation.name_counts_cores else 1
    assert s.chips * per == n
    assert prefix in s.generation.name_prefixes


def test_every_tpu_machine_type_has_a_size() -> None:
    """Kueue quota and the local nodes never fall back for a machine type the catalog itself uses."""
    machines = {m for g in catalog.GENERATIONS.values() for m in (g.multi_host_machine, *g.alternate_machines, *dict(g.single_host_machines).values())}
    assert machines == set(catalog.TPU_VM_SIZES)


@pytest.mark.parametrize(
    "machine,vcpu,gib",
    [
        ("ct5lp-hightpu-4t", 112, 192),  # Compute Engine's ct5lp table
        ("ct4p-hightpu-4t", 240, 407),
        ("e2-standard-8", 8, 32),
        ("n2-highmem-4", 4, 32),
        ("c3-highcpu-22", 22, 22),
    ],
)
def test_machine_size(machine: str, vcpu: int, gib: int) -> None:
    assert catalog.machine_size(machine) == catalog.MachineSize(vcpu, gib)


def test_unknown_machine_size_needs_a_default() -> None:
    fallback = catalog.MachineSize(1, 2)
    assert catalog.machine_size("ct9-hightpu-4t", default=fallback) is fallback
    with pytest.raises(CatalogError, match="ct9-hightpu-4t"):
        catalog.machine_size("ct9-hightpu-4t")
