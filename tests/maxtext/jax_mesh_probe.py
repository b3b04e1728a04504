"""Runs INSIDE the MaxText venv: JAX's own ``mesh_utils.create_device_mesh`` over a list of cases.

Standard library + jax (+ maxtext for topology names) only. ``python jax_mesh_probe.py CASES.json``
prints one JSON object: for each device set, the verdict of every logical mesh ("ok",
"NotImplementedError" or another error's text) and the devices as JAX saw them.

A device set is either ``fake`` (objects carrying the attributes create_device_mesh reads:
id, platform, device_kind, coords, core_on_chip, process_index, slice_index) or ``topology``
(libtpu's devices for a MaxText compile_topology name, through jax.experimental.topologies,
as MaxText's train_compile gets them; no TPU needed).
"""

from __future__ import annotations

import json
import sys
import time


class FakeDevice:
    """What JAX reads from a TPU device when it builds a mesh, and nothing else."""

    platform = "tpu"

    def __init__(self, id_: int, kind: str, coords: tuple[int, int, int], core: int, process: int) -> None:
        self.id = id_
        self.device_kind = kind
        self.coords = coords
        self.core_on_chip = core
        self.process_index = process
        self.slice_index = 0

    def __repr__(self) -> str:
        return f"FakeDevice({self.id}, {self.device_kind!r}, {self.coords}, core {self.core_on_chip})"


def fake_devices(kind: str, chips: list[int], cores: int) -> list[FakeDevice]:
    """Every device of an x*y*z slice, in the order libtpu lists them (x fastest, cores of a chip together, 4-chip hosts)."""
    x, y, z = chips
    out = []
    for k in range(z):
        for j in range(y):
            for i in range(x):
                for c in range(cores):
                    out.append(FakeDevice(len(out), kind, (i, j, k), c, (k * y * x + j * x + i) // 4))
    return out


def topology_devices(name: str) -> list:
    from jax.experimental.topologies import get_topology_desc
    from maxtext.utils import accelerator_to_spec_map

    t = accelerator_to_spec_map.get_system_characteristics(name)
    desc = get_topology_desc(
        platform=t.platform,
        topology_name=t.topology_name,
        chip_config_name=t.chip_config_name,
        chips_per_host_bounds=t.chips_per_host_bounds,
        num_slices=1,
        wrap=t.wrap,
    )
    return list(desc.devices)


def verdicts(devices: list, meshes: list[list[int]]) -> list[str]:
    from jax.experimental import mesh_utils

    out = []
    for shape in meshes:
        try:
            got = mesh_utils.create_device_mesh(shape, devices)
            # Every device once, in the asked shape: a mesh, not only "no exception".
            assert tuple(got.shape) == tuple(shape) and len({d.id for d in got.flat}) == len(devices), got.shape
            out.append("ok")
        except NotImplementedError:
            out.append("NotImplementedError")
        except Exception as e:  # noqa: BLE001 — any other failure is reported as itself
            out.append(f"{type(e).__name__}: {e}"[:300])
    return out


def main(path: str) -> int:
    t0 = time.monotonic()
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    results = {}
    for case in cases:
        if "topology" in case:
            try:
                devices = topology_devices(case["topology"])
            except Exception as e:  # noqa: BLE001 — a topology libtpu does not know is reported, not skipped silently
                results[case["id"]] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
        else:
            devices = fake_devices(case["kind"], case["chips"], case["cores"])
        results[case["id"]] = {
            "kind": devices[-1].device_kind,
            "devices": sorted([[int(c) for c in d.coords], int(d.core_on_chip)] for d in devices),
            "verdicts": verdicts(devices, case["meshes"]),
        }
    results["_seconds"] = round(time.monotonic() - t0, 2)
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
