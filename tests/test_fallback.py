"""Reservation fallback at pool creation: the order (pure), the loop over a fake apply that fails the first N, the dry run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from infra import reservation_fallback as fallback
from infra.spec import load_spec
from tests.support import cli, example_doc, spec_from

SPEC = load_spec("examples/fallback.yaml")  # v6e-16: trillium-res-1 > trillium-res-2 > on-demand > spot
POOL = SPEC.tpu_pools[0]
NODE_POOL = POOL.option_node_pool_names(POOL.capacity_options()[0])[0]


def three_reservations():
    doc = copy.deepcopy(example_doc("fallback"))
    doc["tpu_pools"][0]["capacity"].insert(2, {"mode": "reservation", "name": "trillium-res-3", "zone": "us-east5-b"})
    return spec_from(doc)


def exhausted(node_pool: str) -> str:
    # The shape of terraform's error for a GKE node pool create refused for capacity: the resource's address is
    # infra.stack's construct id (tpu-<node pool>) and the module's (_pool_<hash>).
    return (
        "Error: error creating NodePool: googleapi: Error 429: RESOURCE_EXHAUSTED: The zone does not have enough resources\n\n"
        f"  with google_container_node_pool.tpu-{node_pool}_pool_4E1ADA52,\n"
        "  on cdk.tf.json line 1, in resource:"
    )


class FakeApply:
    """Fails the first ``n`` attempts with ``output``, then applies; records each choice it was given."""

    def __init__(self, n: int, output: str) -> None:
        self.n, self.output, self.choices = n, output, []

    def __call__(self, choice):
        self.choices.append(dict(choice))
        return fallback.Outcome(ok=False, output=self.output) if len(self.choices) <= self.n else fallback.Outcome(ok=True)


def test_the_order_is_the_spec_order():
    (chain,) = fallback.chains(SPEC)
    assert chain.reservations == ("trillium-res-1", "trillium-res-2") and chain.field == "tpu_pools[0].capacity"
    assert fallback.first_choice(SPEC) == {"v6e-16": "trillium-res-1"}
    assert fallback.advance(SPEC, {"v6e-16": "trillium-res-1"}, "v6e-16") == {"v6e-16": "trillium-res-2"}
    assert fallback.advance(SPEC, {"v6e-16": "trillium-res-2"}, "v6e-16") is None
    assert fallback.chains(load_spec("examples/v6e-reservation.yaml")) == []  # one reservation: nothing to fall back to


def test_the_first_that_applies_is_kept_one_line_per_attempt():
    spec = three_reservations()
    lines: list[str] = []
    apply = FakeApply(2, exhausted(NODE_POOL))
    kept = fallback.execute(spec, apply, lines.append)
    assert kept == {"v6e-16": "trillium-res-3"}
    assert [c["v6e-16"] for c in apply.choices] == ["trillium-res-1", "trillium-res-2", "trillium-res-3"]
    assert lines == [
        "attempt 1 (v6e-16: reservation trillium-res-1): v6e-16 RESOURCE_EXHAUSTED; next: reservation trillium-res-2",
        "attempt 2 (v6e-16: reservation trillium-res-2): v6e-16 RESOURCE_EXHAUSTED; next: reservation trillium-res-3",
        "attempt 3 (v6e-16: reservation trillium-res-3): applied",
    ]


def test_every_reservation_exhausted_stops_naming_the_list():
    apply = FakeApply(5, exhausted(NODE_POOL))
    lines: list[str] = []
    with pytest.raises(fallback.FallbackExhausted) as e:
        fallback.execute(SPEC, apply, lines.append)
    assert len(apply.choices) == 2 and "tpu_pools[0].capacity" in str(e.value) and "trillium-res-1, trillium-res-2" in str(e.value)
    assert lines[-1].endswith("RESOURCE_EXHAUSTED; no reservation left")


def test_another_failure_is_not_a_reason_to_try_the_next():
    apply = FakeApply(1, "Error: googleapi: Error 403: Permission denied on resource project my-tpu-project")
    lines: list[str] = []
    with pytest.raises(fallback.ApplyFailed):
        fallback.execute(SPEC, apply, lines.append)
    assert len(apply.choices) == 1 and "403" in lines[0]
    # Exhausted, but for a node pool that is not a fallback pool's (the CPU pool): no reservation to move.
    assert fallback.exhausted_pool(SPEC, exhausted("cpu")) is None
    with pytest.raises(fallback.ApplyFailed) as e:
        fallback.execute(SPEC, FakeApply(1, exhausted("cpu")), lines.append)
    assert "not for node pools with another reservation" in str(e.value)
    assert fallback.exhausted_pool(SPEC, exhausted(NODE_POOL)) == "v6e-16"
    # GKE's own path names it too (an error block with no `with` line); a longer name that starts with it does not.
    assert fallback.exhausted_pool(SPEC, f"Error: RESOURCE_EXHAUSTED creating clusters/fallback/nodePools/{NODE_POOL}") == "v6e-16"
    assert fallback.exhausted_pool(SPEC, f"Error: RESOURCE_EXHAUSTED creating clusters/fallback/nodePools/{NODE_POOL}0") is None


# ------------------------------------------------------------------ attribution: each error block to its own node pool


def two_pools():
    """Two pools, each with two reservations: v6e-16 (trillium-res-1 > -2) and v6e-32 (big-res-1 > -2)."""
    doc = copy.deepcopy(example_doc("fallback"))
    second = copy.deepcopy(doc["tpu_pools"][0])
    second |= {"name": "v6e-32", "type": "v6e-32", "slices": 1}
    second["capacity"] = [{"mode": "reservation", "name": f"big-res-{k}", "zone": "us-east5-b"} for k in (1, 2)]
    doc["tpu_pools"].append(second)
    spec = spec_from(doc)
    names = {p.name: p.option_node_pool_names(p.capacity_options()[0]) for p in spec.tpu_pools}
    return spec, names


def framed(summary: str, address: str, detail: str = "") -> str:
    """One diagnostic as terraform 1.x prints it: framed in box-drawing characters, the resource on its `with` line."""
    body = (
        [f"Error: {summary}", ""]
        + ([detail, ""] if detail else [])
        + [f"  with {address},", f"  on cdk.tf.json line 412, in resource.{address}:", " 412:       },"]
    )
    return "╷\n" + "\n".join(f"│ {ln}".rstrip() for ln in body) + "\n╵\n"


def node_pool_address(node_pool: str) -> str:
    return f"google_container_node_pool.tpu-{node_pool}_pool_4E1ADA52"


CAPACITY = "error creating NodePool: googleapi: Error 429: RESOURCE_EXHAUSTED: The zone 'us-east5-b' does not have enough resources available"


def test_a_capacity_error_is_charged_to_its_own_pool_not_the_first_named():
    spec, names = two_pools()
    # The first block names v6e-16's node pool but is a warning; the capacity error is v6e-32's.
    out = (
        "╷\n│ Warning: Argument is deprecated\n│ \n│   with " + node_pool_address(names["v6e-16"][0]) + ",\n╵\n"
        + framed(CAPACITY, node_pool_address(names["v6e-32"][0]))
    )  # fmt: skip
    assert [e.address for e in fallback.errors(out)] == [node_pool_address(names["v6e-32"][0])]
    assert fallback.exhausted_pool(spec, out) == "v6e-32"
    apply = FakeApply(1, out)
    lines: list[str] = []
    kept = fallback.execute(spec, apply, lines.append)
    assert kept == {"v6e-16": "trillium-res-1", "v6e-32": "big-res-2"}  # v6e-16 stays on the reservation that worked
    assert lines[0].endswith("v6e-32 RESOURCE_EXHAUSTED; next: reservation big-res-2")


def test_capacity_errors_of_two_pools_move_both():
    spec, names = two_pools()
    out = framed(CAPACITY, node_pool_address(names["v6e-16"][1])) + framed(CAPACITY, node_pool_address(names["v6e-32"][0]))
    apply = FakeApply(1, out)
    lines: list[str] = []
    assert fallback.execute(spec, apply, lines.append) == {"v6e-16": "trillium-res-2", "v6e-32": "big-res-2"}
    assert len(apply.choices) == 2 and "v6e-16 RESOURCE_EXHAUSTED" in lines[0] and "v6e-32 RESOURCE_EXHAUSTED" in lines[0]


def test_a_non_capacity_error_beside_a_capacity_one_stops_naming_its_pool():
    spec, names = two_pools()
    denied = (
        "error creating NodePool: googleapi: Error 403: Required 'compute.reservations.use' permission for 'projects/p/zones/us-east5-b/reservations/big-res-1'"
    )
    out = framed(CAPACITY, node_pool_address(names["v6e-16"][0])) + framed(denied, node_pool_address(names["v6e-32"][0]))
    apply = FakeApply(1, out)
    lines: list[str] = []
    with pytest.raises(fallback.ApplyFailed) as e:
        fallback.execute(spec, apply, lines.append)
    msg = str(e.value)
    assert len(apply.choices) == 1 and "\n" not in msg  # stopped: no reservation moved, one line
    assert f"v6e-32 (node pool {names['v6e-32'][0]})" in msg and "Error 403" in msg and "not a capacity refusal" in msg
    assert "v6e-16" not in msg


def test_a_capacity_error_of_a_resource_without_alternatives_stops_naming_it():
    spec, names = two_pools()
    cpu = "google_container_node_pool.cpu_pool_0A1B2C3D"
    out = framed(CAPACITY, cpu) + framed(CAPACITY, node_pool_address(names["v6e-16"][0]))
    with pytest.raises(fallback.ApplyFailed) as e:
        fallback.execute(spec, FakeApply(1, out), [].append)
    assert cpu in str(e.value) and "not for node pools with another reservation" in str(e.value)


def test_a_failure_without_error_blocks_stops_with_its_last_line():
    with pytest.raises(fallback.ApplyFailed) as e:
        fallback.execute(SPEC, FakeApply(1, "terraform: signal: killed\n"), [].append)
    assert "signal: killed" in str(e.value)


def test_deploy_dry_run_prints_the_order(tmp_path: Path):
    proc = cli("infra", "deploy", "--spec", "examples/fallback.yaml", "--out", str(tmp_path / "o"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    order = [ln for ln in lines if ln.startswith("# reservation fallback")]
    assert order == [
        "# reservation fallback for v6e-16 (v6e-16-res-0, v6e-16-res-1): 1. trillium-res-1 > 2. trillium-res-2; the next is tried on RESOURCE_EXHAUSTED"
    ]
    # the checks' GETs come first (both reservations), the apply last
    assert any("reservations/trillium-res-2" in ln for ln in lines[: lines.index(order[0])])
    assert lines[-1].endswith("apply -input=false tfplan")


FAKE_TERRAFORM = """#!/bin/sh
# terraform as far as deploy needs it: init and plan succeed; apply refuses for capacity while the stack
# still draws on trillium-res-1, as GKE does when that reservation is full.
dir="${1#-chdir=}"
echo "$2" >> "$CALLS"
if [ "$2" = apply ] && grep -q '"trillium-res-1"' "$dir/cdk.tf.json"; then
  echo 'Error: error creating NodePool: googleapi: Error 429: RESOURCE_EXHAUSTED: no available resources' >&2
  echo '  with google_container_node_pool.tpu-v6e-16-res-0_pool_4E1ADA52,' >&2
  exit 1
fi
exit 0
"""


def test_deploy_falls_through_to_the_next_reservation(tmp_path: Path):
    """The real deploy loop (synth with the choice, plan, apply, read terraform's error) over a terraform that refuses the first."""
    fake = tmp_path / "terraform"
    fake.write_text(FAKE_TERRAFORM)
    fake.chmod(0o755)
    calls, out = tmp_path / "calls", tmp_path / "out"
    env = {"TGK_TERRAFORM": str(fake), "CALLS": str(calls)}
    proc = cli("infra", "deploy", "--spec", "examples/fallback.yaml", "--out", str(out), "--yes", "--no-checks", env=env)
    assert proc.returncode == 0, proc.stderr
    attempts = [ln for ln in proc.stderr.splitlines() if ln.startswith("attempt ")]
    assert attempts == [
        "attempt 1 (v6e-16: reservation trillium-res-1): v6e-16 RESOURCE_EXHAUSTED; next: reservation trillium-res-2",
        "attempt 2 (v6e-16: reservation trillium-res-2): applied",
    ]
    assert calls.read_text().split() == ["init", "plan", "apply", "plan", "apply"]
    (stack,) = out.glob("stacks/*/cdk.tf.json")
    text = stack.read_text()
    assert '"trillium-res-2"' in text and '"trillium-res-1"' not in text  # what is left on disk is what was applied
