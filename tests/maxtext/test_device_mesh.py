"""The planner's device-mesh verdicts (workloads/planning/device_mesh.py) against the real thing, no TPU needed.

Three checks, in the MaxText venv (JAX 0.12 and MaxText 0.2.5 as the image has them):

- JAX's own ``mesh_utils.create_device_mesh`` on fake devices (the attributes it reads: id,
  platform, device_kind, coords, core_on_chip, ...) for every catalog slice shape of v5e, v6e,
  v4, v5p and tpu7x up to 512 devices and a few device kinds the catalog lacks, over thousands
  of logical meshes in MaxText's axis order: accepted or NotImplementedError, as the planner says;
- libtpu's topology devices (what MaxText's AOT compile gets) are the fake devices, and give the
  same verdicts;
- MaxText's own mesh creation (``maxtext_utils.create_device_mesh`` through its config loader and
  train_compile's topology mesh, workloads/maxtext/driver.py) on a run's arguments with the mesh
  changed: refused exactly where the planner refuses, allow_split_physical_axes=true included.
"""

from __future__ import annotations

import json
from pathlib import Path

from infra.catalog import SliceShape, shape, valid_topologies
from tests.support.specs import one_pool
from workloads.maxtext import env as maxtext_env
from workloads.planning.device_mesh import DEVICE_KINDS, MAXTEXT_MESH_AXES, Layout, PhysicalMesh, Unplaceable, lay_out, physical_mesh
from workloads.planning.maxtext_keys import MESH_AXES
from workloads.planning.planner import Overrides, PlanError, plan_run

PROBE = Path(__file__).resolve().with_name("jax_mesh_probe.py")

# Logical meshes are spread over these MaxText axes (the rest 1), every way the devices factor.
PATTERNS = [
    ("data", "fsdp", "tensor", "expert"),
    ("stage", "fsdp", "context", "tensor"),
    ("diloco", "fsdp_transpose", "tensor_sequence", "autoregressive"),
]
PER_SHAPE = 60  # meshes per slice shape, spread evenly over all the factorizations


def _factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    if k == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in _factorizations(n // d, k - 1)]


def _meshes(devices: int, limit: int = PER_SHAPE) -> list[list[int]]:
    every = []
    for pattern in PATTERNS:
        for f in _factorizations(devices, len(pattern)):
            degrees = dict(zip(pattern, f, strict=True))
            every.append([degrees.get(a, 1) for a in MAXTEXT_MESH_AXES])
    step = max(1, len(every) // limit)
    return every[::step]


def _catalog_shapes(most: int = 512) -> list[SliceShape]:
    out = []
    for gen in DEVICE_KINDS:
        for topo in valid_topologies(gen):
            try:
                s = shape(gen, topo)
            except Exception:  # noqa: BLE001 — a topology the catalog lists but cannot build alone is not a slice
                continue
            if s.devices <= most:
                out.append(s)
    return out


def _verdict(p: PhysicalMesh, sizes: list[int]) -> str:
    got = lay_out(p, list(zip(MAXTEXT_MESH_AXES, sizes, strict=True)))
    return "NotImplementedError" if isinstance(got, Unplaceable) else "ok"


def _probe(cases: list[dict], venv: Path, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "cases.json"
    path.write_text(json.dumps(cases))
    done = maxtext_env.run([str(maxtext_env.python(venv)), str(PROBE), str(path)], maxtext_env.local_env(()), work, "probe", timeout=900)
    assert done.returncode == 0 and not done.timed_out, done.stderr_text()[-3000:]
    return json.loads(done.stdout_text().strip().splitlines()[-1])


def _fake_case(cid: str, p: PhysicalMesh, meshes: list[list[int]]) -> dict:
    return {"id": cid, "kind": p.device_kind, "chips": list(p.chips), "cores": p.cores_per_chip, "meshes": meshes}


# Device kinds the catalog does not offer, for the handlers and physical meshes they take.
EXTRA = {
    "v4i-2x2x1": PhysicalMesh("TPU v4 lite", (2, 2, 1)),
    "v3-2x2x1-2core": PhysicalMesh("TPU v3", (2, 2, 1), 2),
    "v5p-2x2x4-2core": PhysicalMesh("TPU v5", (2, 2, 4), 2),
}


def test_planner_verdicts_are_jax_create_device_mesh_verdicts_on_fake_devices(maxtext_venv, tmp_path) -> None:
    meshes = {s.key: (physical_mesh(s), _meshes(s.devices)) for s in _catalog_shapes()}
    meshes |= {k: (p, _meshes(p.devices)) for k, p in EXTRA.items()}
    # Cases worked by hand in tests/test_device_mesh.py, on the devices JAX builds them from.
    meshes["tpu7x-4x4x8 by hand"] = (physical_mesh(shape("tpu7x", "4x4x8")), [[1, 2, 1, 8, 1, 1, 1, 1, 16, 1, 1, 1], [1, 1, 1, 16, 1, 1, 1, 1, 16, 1, 1, 1]])
    meshes["v5p-2x2x4 by hand"] = (physical_mesh(shape("v5p", "2x2x4")), [[1, 2, 1, 2, 1, 1, 1, 1, 4, 1, 1, 1], [1, 2, 1, 4, 1, 1, 1, 1, 2, 1, 1, 1]])
    out = _probe([_fake_case(k, p, m) for k, (p, m) in meshes.items()], maxtext_venv, tmp_path)
    mismatches, counts = [], {"ok": 0, "NotImplementedError": 0, "handler": 0}
    for cid, (p, ms) in meshes.items():
        for sizes, jax_says in zip(ms, out[cid]["verdicts"], strict=True):
            ours = _verdict(p, sizes)
            counts[jax_says] = counts.get(jax_says, 0) + 1
            counts["handler"] += isinstance(got := lay_out(p, list(zip(MAXTEXT_MESH_AXES, sizes, strict=True))), Layout) and got.handler is not None
            if ours != jax_says:
                mismatches.append((cid, sizes, ours, jax_says))
    total = sum(len(m) for _, m in meshes.values())
    print(f"\n[device mesh] {len(meshes)} device sets, {total} logical meshes, JAX {out['_seconds']} s: {counts}")
    assert not mismatches, mismatches[:20]
    assert set(counts) == {"ok", "NotImplementedError", "handler"}, counts  # no other error from JAX
    assert counts["ok"] >= 500 and counts["NotImplementedError"] >= 500 and counts["handler"] >= 50, counts
    assert out["tpu7x-4x4x8 by hand"]["verdicts"] == ["NotImplementedError", "ok"]
    assert out["v5p-2x2x4 by hand"]["verdicts"] == ["NotImplementedError", "ok"]


# Slices MaxText names a compile topology for (utils/accelerator_to_spec_map.py), across generations and handlers.
TOPOLOGIES = [
    "v5e-2x4",
    "v5e-4x4",
    "v5e-8x16",
    "v6e-4x4",
    "v6e-8x8",
    "v4-2x2x1",
    "v4-2x2x4",
    "v5p-2x2x2",
    "v5p-4x4x4",
    "tpu7x-2x2x1",
    "tpu7x-2x4x4",
    "tpu7x-4x4x8",
]


def test_libtpus_topology_devices_are_the_fake_ones_and_get_the_same_verdicts(maxtext_venv, tmp_path) -> None:
    shapes = {k: shape(*k.split("-", 1)) for k in TOPOLOGIES}
    cases = [{"id": k, "topology": maxtext_env.compile_topology(s), "meshes": _meshes(s.devices, 25)} for k, s in shapes.items()]
    out = _probe(cases, maxtext_venv, tmp_path)
    for case in cases:
        k, s = case["id"], shapes[case["id"]]
        got = out[k]
        assert "error" not in got, (k, got)
        p = physical_mesh(s)
        assert got["kind"] == p.device_kind, (k, got["kind"])
        x, y, z = p.chips
        fake = sorted([[i, j, m], c] for i in range(x) for j in range(y) for m in range(z) for c in range(p.cores_per_chip))
        assert got["devices"] == fake, k
        assert got["verdicts"] == [_verdict(p, m) for m in case["meshes"]], k


# --------------------------------------------------------------- MaxText's own mesh creation

# maxtext-6b with 4 of its layers: every case fits HBM, so a refusal is the mesh's.
SMALL = ("per_device_batch_size=1", "base_num_decoder_layers=4")

# (id, slice, slices, ICI degrees, other --set, what MaxText's error says when it refuses)
MAXTEXT_CASES = [
    ("v5e-tensor8", "v5e-4x4", 1, {"tensor": 8, "fsdp": 2}, (), "NotImplementedError"),
    ("v5e-tensor8-split", "v5e-4x4", 1, {"tensor": 8, "fsdp": 2}, ("allow_split_physical_axes=true",), None),
    ("v5e-tensor4", "v5e-4x4", 1, {"tensor": 4, "fsdp": 4}, (), None),
    ("v5e-tensor8-x2", "v5e-4x4", 2, {"tensor": 8, "fsdp": 2}, (), "NotImplementedError"),
    ("v5e-sequence2", "v5e-4x4", 1, {"sequence": 2, "fsdp": 8}, (), "does not match"),
    ("v5e-2x4-handler", "v5e-2x4", 1, {"data": 2, "fsdp": 2, "tensor": 2}, (), None),  # the 8-device tray order; the torus would refuse
    ("v6e-8x16-tensor4", "v6e-8x16", 1, {"tensor": 4, "fsdp": 32}, (), "NotImplementedError"),
    ("v6e-8x16-tensor8", "v6e-8x16", 1, {"tensor": 8, "fsdp": 16}, (), None),
    ("v5p-greedy", "v5p-2x2x4", 1, {"data": 2, "fsdp": 2, "tensor": 4}, (), "NotImplementedError"),
    ("v5p-fsdp4", "v5p-2x2x4", 1, {"data": 2, "fsdp": 4, "tensor": 2}, (), None),
    ("v5p-pipeline", "v5p-2x2x4", 1, {"pipeline": 2, "fsdp": 8}, (), None),
    ("v5p-pipeline-tensor4", "v5p-2x2x4", 1, {"pipeline": 2, "fsdp": 2, "tensor": 4}, (), "NotImplementedError"),
    ("tpu7x-core-first", "tpu7x-4x4x8", 1, {"data": 2, "fsdp": 8, "tensor": 16}, (), "NotImplementedError"),
    ("tpu7x-tensor16", "tpu7x-4x4x8", 1, {"fsdp": 16, "tensor": 16}, (), None),
]


def _planner_verdict(spec, slices: int, sets: tuple[str, ...]):
    """The plan (accepted) or the refusal's text; a refusal for any reason but the mesh's layout fails the test."""
    try:
        return plan_run("maxtext-6b", spec, Overrides(slices=slices, sets=sets))
    except PlanError as e:
        assert "physical axes" in str(e) or "not in MaxText" in str(e), str(e)
        return str(e)


def test_maxtext_refuses_exactly_the_meshes_the_planner_refuses(maxtext_venv, tmp_path) -> None:
    cases, said = [], {}
    for cid, key, slices, degrees, extra, _ in MAXTEXT_CASES:
        gen, _, topo = key.partition("-")
        spec = one_pool(gen, topo, slices)
        ici = {f"ici_{a}_parallelism": str(degrees.get(a, 1)) for a in MESH_AXES}
        sets = (*(f"{k}={v}" for k, v in ici.items() if v != "1" or k == "ici_fsdp_parallelism"), *extra, *SMALL)
        said[cid] = _planner_verdict(spec, slices, sets)
        base = plan_run("maxtext-6b", spec, Overrides(slices=slices, sets=SMALL))  # the run's other arguments
        extra_args = {**ici, **dict(s.split("=", 1) for s in extra), **maxtext_env.topology_args(base.target.shape, slices)}
        args = maxtext_env.local_args(base.program.args, tmp_path / "work", extra_args)
        cases.append((cid, args, dict(base.program.env)))
    out = maxtext_env.validate(cases, maxtext_venv, tmp_path / "work")
    for cid, _, _, degrees, _, refusal in MAXTEXT_CASES:
        r, planner = out[cid], said[cid]
        if refusal is None:
            assert r["ok"], (cid, r.get("error"))
            assert not isinstance(planner, str), (cid, planner)
            assert r["mesh"] == {("stage" if a == "pipeline" else a): d for a, d in degrees.items() if d > 1}, (cid, r["mesh"])
        else:
            assert not r["ok"] and refusal in r["error"], (cid, r)
            assert isinstance(planner, str), (cid, "the planner accepted what MaxText refuses:", r["error"][:300])
