"""The multi-tier checkpointing RAM disk the planner derives, per recipe and shape.

    .venv/bin/python scripts/mtc_ramdisk_sizes.py [--json out.json]

Plans each (recipe, example spec, slices) with --multi-tier-checkpointing, its pool given the
whole VM's memory as ramdisk_gib so only the documented rule and the VM's memory decide, and
prints the parameters, the checkpoint (12 B/param), the RAM disk per VM (2 x checkpoint / hosts
per slice + 15%) and the VM's memory. A run whose RAM disk does not fit is printed with the
planner's refusal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.catalog import machine_size  # noqa: E402
from infra.spec import EXAMPLES_DIR, parse_spec  # noqa: E402
from toolkit.errors import ToolkitError  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402

CASES = (
    ("maxtext-6b", "default", 2, None),
    ("llama3-8b", "v6e-reservation", 2, "pretrain"),
    ("llama3-8b", "v4", 2, None),
)


def figure(recipe: str, example: str, slices: int, team: str | None) -> dict:
    doc = yaml.safe_load((EXAMPLES_DIR / f"{example}.yaml").read_text())
    first = doc["tpu_pools"][0]
    spec0 = parse_spec(doc)
    memory = machine_size(spec0.tpu_pools[0].shape.machine_type).memory_gib
    first["multi_tier_checkpointing"] = {"ramdisk_gib": memory}
    spec = parse_spec(doc)
    row = {"recipe": recipe, "spec": example, "pool": first["name"], "slices": slices}
    try:
        plan = plan_run(recipe, spec, Overrides(slices=slices, pool=first["name"], team=team, multi_tier_checkpointing=True))
    except ToolkitError as e:
        return {**row, "refused": str(e)}
    m = plan.policy.multi_tier
    return {**row, "params_b": round(m.params / 1e9, 2), "hosts_per_slice": m.hosts_per_slice, **m.as_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = [figure(*c) for c in CASES]
    for r in rows:
        head = f"{r['recipe']:<11} {r['spec']:<16} {r['pool']:<9} x{r['slices']}"
        if "refused" in r:
            print(f"{head}  refused: {r['refused']}")
        else:
            print(
                f"{head}  {r['params_b']:>6}B params  checkpoint {r['checkpoint_gib']:>6} GiB  RAM disk {r['ramdisk_gib_needed']:>6} GiB/VM"
                f" ({r['hosts_per_slice']} hosts/slice)  VM memory {r['vm_memory_gib']:g} GiB"
            )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
