"""The spec's cross-field rules: what no single section can check, as one ordered list of functions (``RULES``).

Each rule takes the validated fields (``EnvFields``) and raises a ``SpecError`` naming the
exact field path and the fix. ``EnvSpec`` runs them in ``RULES`` order, after every
section has validated, and the first refusal is the one the user sees: the order is part
of the behaviour (``tests/bad_specs/`` pins each refusal's words, and a spec with two
problems gets the earlier rule's). A new rule is a ``check_*`` function here and one
entry in ``RULES``; ``tests/test_spec_rules.py`` keeps every ``check_*`` in the list.

The section-level rules (a pool's own shape, a team's own priorities) are model
validators on the sections themselves; the derived names the toolkit makes (service
accounts, namespaces, queues, networks, the state bucket) are checked by
``infra.derived_names.check``, which runs here in its place in the order.
"""

from __future__ import annotations

import ipaddress
import math
import re

from infra import catalog, derived_names, naming, quotas
from infra.gke_features import FLEX_START_GENERATIONS, IN_PLACE_RESTART_MIN_JOBSET, MTC_GENERATIONS
from infra.naming import GCE_NAME_MAX, GCP_ID, GCP_ID_MAX, GCP_ID_MIN, GKE_NODE_POOL_NAME_MAX
from infra.price_table import Prices, load_table
from infra.spec import ironwood
from infra.spec.capacity import FlexStart, Reservation, flex_start_words
from infra.spec.cidrs import Cidrs, derive_cidrs
from infra.spec.env import EnvFields
from infra.spec.kueue import DEFAULT_JOBSET_VERSION, KUEUE_MAX_FLAVORS_PER_GROUP
from infra.spec.section import overlap
from infra.spec.storage import BucketPurpose, BucketSpec
from infra.spec.tpu_pools import MultiTierCheckpointingSpec, TpuPoolSpec, option_field
from toolkit.errors import SpecError, shown
from toolkit.names import K8S_NAME_MAX, KUEUE_QUEUE_LABEL


def check_zones(spec: EnvFields) -> None:
    for i, z in enumerate(spec.zones):
        if not z.startswith(spec.region + "-"):
            raise SpecError(f"zones[{i}]", f"{z!r} is not in region {spec.region!r}", f"use a zone like {spec.region}-a")
    if len(set(spec.zones)) != len(spec.zones):
        raise SpecError("zones", "lists a zone twice", "list each zone once")


def check_pools(spec: EnvFields) -> None:
    """Unique pool names, zones among the cluster's, reservations in the pool's zone, one machine per shape, CPU nodes."""
    seen: dict[str, str] = {}
    pool_names = {spec.cpu_pool.name: "cpu_pool.name"}
    reservations: dict[tuple[str, str], str] = {}
    for i, pool in enumerate(spec.tpu_pools):
        _reservation_once(spec, i, pool, reservations)
        where = f"tpu_pools[{i}]"
        if pool.name in pool_names or any(n in pool_names for n in pool.node_pool_names()):
            raise SpecError(f"{where}.name", f"{pool.name!r} clashes with {pool_names.get(pool.name, 'another pool')}", "give every pool a unique name")
        for n in pool.node_pool_names():
            pool_names[n] = f"{where}.name"
        pool_names[pool.name] = f"{where}.name"
        if pool.zone and pool.zone not in spec.zones:
            raise SpecError(f"{where}.zone", f"{pool.zone!r} is not one of the cluster's zones {spec.zones}", "add it to zones or pick one of them")
        _capacity_options(spec, i, pool)
        key = pool.shape.key
        if key in seen and seen[key] != pool.shape.machine_type:
            raise SpecError(
                f"{where}.chips_per_vm",
                f"{key} is both single-host and multi-host here; Kueue and the node labels cannot tell them apart",
                "use one machine type per topology",
            )
        seen[key] = pool.shape.machine_type

    if spec.cpu_pool.max_nodes * len(spec.zones) < 1:
        raise SpecError("cpu_pool.max_nodes", "the CPU pool has no nodes", "set max_nodes >= 1")


def _reservation_once(spec: EnvFields, i: int, pool: TpuPoolSpec, seen: dict[tuple[str, str], str]) -> None:
    """A reservation feeds one pool: two pools drawing on it would each be planned for all of it.
    (Twice in one pool's list is refused as a repeated option when the list is parsed.)"""
    for k, cap in enumerate(pool.capacities):
        if not isinstance(cap, Reservation):
            continue
        field = f"tpu_pools[{i}].capacity" + (f"[{k}]" if pool.has_fallback else "")
        key = (cap.project or spec.project, cap.name)
        if key in seen:
            raise SpecError(
                f"{field}.name",
                f"reservation {cap.name!r} is already listed by {seen[key]}",
                "list each reservation in one pool only (one pool with a capacity list can try several)",
            )
        seen[key] = field


def _capacity_options(spec: EnvFields, i: int, pool: TpuPoolSpec) -> None:
    """Every reservation in the pool's zone; a fallback pool's node pool names fit GKE and its shape is its own."""
    where = f"tpu_pools[{i}]"
    zone = spec.pool_zone(pool)
    for k, cap in enumerate(pool.capacities):  # every listed option: alternates included
        field = f"{where}.capacity[{k}]" if pool.has_fallback else f"{where}.capacity"
        if isinstance(cap, Reservation) and cap.zone != zone:
            raise SpecError(
                f"{field}.zone",
                f"reservation {cap.name!r} is in {cap.zone} but the pool runs in {zone}",
                f"set the pool's zone to {cap.zone} (and list it in zones) or use a reservation in {zone}",
            )
        if isinstance(cap, FlexStart):
            _flex_start(spec, field, pool, cap)
    if pool.compute_class is not None:
        _compute_class(spec, i, pool)
        return
    if pool.queued and not pool.has_fallback:
        _own_shape(spec, f"{where}.capacity.queued", pool, "queued provisioning")
    if not pool.has_fallback:
        return
    longest = max(pool.node_pool_names(), key=len)
    if len(longest) > GKE_NODE_POOL_NAME_MAX:
        raise SpecError(
            f"{where}.name",
            f"makes the node pool name {longest!r}, {len(longest)} characters; GKE allows {GKE_NODE_POOL_NAME_MAX}",
            f"shorten the name by {len(longest) - GKE_NODE_POOL_NAME_MAX} characters",
        )
    _own_shape(spec, f"{where}.capacity", pool, "a capacity list")


def _compute_class(spec: EnvFields, i: int, pool: TpuPoolSpec) -> None:
    """What a ComputeClass cannot express, and a class name used twice."""
    where = f"tpu_pools[{i}]"
    for k, cap in enumerate(pool.capacities):
        field = f"{where}.capacity[{k}]" if pool.has_fallback else f"{where}.capacity"
        if isinstance(cap, FlexStart) and cap.queued:
            raise SpecError(
                f"{field}.queued",
                "queued provisioning asks GKE for node pools the stack declares, and a compute class pool has none",
                "set queued: false (the class asks GKE's autoscaler for flex-start capacity itself) or remove compute_class",
            )
    if pool.autoscaling:
        raise SpecError(f"{where}.autoscaling", "is implied by compute_class (GKE creates and removes the slices)", "remove autoscaling")
    for j, other in enumerate(spec.tpu_pools[:i]):
        if other.class_name == pool.class_name or other.name == pool.class_name:
            raise SpecError(
                f"{where}.compute_class.name",
                f"{pool.class_name!r} is already tpu_pools[{j}]'s " + ("ComputeClass" if other.class_name == pool.class_name else "name"),
                "give each pool's class its own name",
            )


def _own_shape(spec: EnvFields, field: str, pool: TpuPoolSpec, what: str) -> None:
    """Its Kueue flavors select this pool's nodes only: no other pool may share the shape."""
    other = next((p for p in spec.tpu_pools if p is not pool and p.compute_class is None and p.shape.key == pool.shape.key), None)
    if other is not None:
        raise SpecError(
            field,
            f"{what} needs its shape to itself, but pool {other.name!r} is also {pool.shape.key}",
            f"merge the two pools into one with a capacity list, or give {other.name!r} another shape",
        )


def _flex_start(spec: EnvFields, field: str, pool: TpuPoolSpec, cap: FlexStart) -> None:
    """DWS flex-start exists only for some TPU generations (and GKE versions: ``_gke_floors``)."""
    gen = pool.shape.generation.name
    if gen not in FLEX_START_GENERATIONS:
        key, what = flex_start_words(field, cap)
        raise SpecError(
            key,
            f"{what} is not offered for TPU {gen}",
            f"use a {', '.join(FLEX_START_GENERATIONS)} pool, or on-demand, spot or a reservation for {gen}",
        )


def check_ironwood(spec: EnvFields) -> None:
    """Dynamic slicing's capacity, shape, generation and channel; the slice controller where a pool needs it (``infra.spec.ironwood``)."""
    ironwood.check(spec)


def check_flavor_count(spec: EnvFields) -> None:
    """Every flavor goes into each team's one resource group, which Kueue caps: refused here, before anything is applied."""
    count = len(spec.flavor_names())
    if count > KUEUE_MAX_FLAVORS_PER_GROUP:
        raise SpecError(
            "tpu_pools",
            f"{count} ResourceFlavors (distinct TPU shapes and capacity options), but a Kueue resource group holds at most {KUEUE_MAX_FLAVORS_PER_GROUP}",
            "use fewer distinct generation/topology combinations or shorter capacity lists",
        )


def check_gke_version(spec: EnvFields) -> None:
    mv = spec.cluster.min_version
    for floor, why in spec.gke_floors():
        if mv and catalog.gke_version_tuple(mv) < catalog.gke_version_tuple(floor):
            raise SpecError("cluster.min_version", f"{mv} is below {floor}, {why}", f"set it to {floor} or later, or remove it to use the floor")


def check_teams(spec: EnvFields) -> None:
    ns_seen: dict[str, int] = {}
    queue_seen: set[str] = set()
    for i, t in enumerate(spec.teams):
        if t.ns in ns_seen:
            raise SpecError(f"teams[{i}].namespace", f"namespace {t.ns!r} is already teams[{ns_seen[t.ns]}]'s", "give each team its own namespace")
        ns_seen[t.ns] = i
        if t.name in queue_seen:
            raise SpecError(f"teams[{i}].name", f"team {t.name!r} is listed twice", "give each team a unique name")
        queue_seen.add(t.name)
    for i, t in enumerate(spec.teams):
        if t.fair_sharing_weight is not None and not spec.fair_sharing:
            raise SpecError(
                f"teams[{i}].fair_sharing_weight",
                "has no effect while Kueue's fair sharing is off (it is on by default only with two or more teams)",
                "remove it, or set kueue.fair_sharing.enabled: true",
            )
        if t.preemption.borrow_within_cohort is not None and spec.fair_sharing:
            raise SpecError(
                f"teams[{i}].preemption.borrow_within_cohort",
                "is classical preemption, which Kueue does not use while fair sharing is on",
                "remove it, or set kueue.fair_sharing.enabled: false",
            )
    total_share = sum(t.quota_share for t in spec.teams)
    if total_share > 1.0 + 1e-9:
        raise SpecError("teams", f"quota shares add up to {total_share:g}, more than the chips that exist", "make the quota_share values sum to at most 1")
    _xpk(spec, ns_seen, total_share)


def _xpk(spec: EnvFields, team_namespaces: dict[str, int], team_share: float) -> None:
    """xpk's pods run on the host network, so its namespace must admit them."""
    if not spec.xpk.enabled:
        return
    i = team_namespaces.get(spec.xpk.namespace)
    if i is not None and not spec.teams[i].host_network:
        raise SpecError(
            "xpk.namespace",
            f"{spec.xpk.namespace!r} is teams[{i}]'s namespace, which refuses hostNetwork pods, and every xpk TPU pod uses hostNetwork",
            f"set teams[{i}].host_network: true or give xpk its own namespace (xpk.namespace, and the same namespace in the kube context xpk uses)",
        )
    if team_share + spec.xpk.quota_share > 1.0 + 1e-9:
        raise SpecError(
            "xpk.quota_share",
            f"the teams' quota shares ({team_share:g}) plus xpk's ({spec.xpk.quota_share:g}) add up to more than 1",
            "lower xpk.quota_share (0 lets xpk borrow idle chips only) or the teams' quota_share",
        )


def check_quota_shares(spec: EnvFields) -> None:
    """Quotas in whole slices that add up to every flavor's slices (infra.quotas says why)."""
    quotas.check(spec.quota_owners(), spec.flavor_slices())


def check_buckets_and_ci(spec: EnvFields) -> None:
    names = [b.name for b in spec.buckets]
    for i, b in enumerate(spec.buckets):
        if names.index(b.name) != i:
            raise SpecError(f"buckets[{i}].name", f"bucket {b.name!r} is listed twice", "bucket names are global; list each once")
        _bucket_team(spec, i, b)
    if spec.cloud_build.enabled and not spec.artifact_registry.enabled:
        raise SpecError("cloud_build.enabled", "CI builds push images but artifact_registry is disabled", "enable artifact_registry or disable cloud_build")


def _bucket_team(spec: EnvFields, i: int, b: BucketSpec) -> None:
    """A bucket belongs to exactly one team: only that team's service account is granted it."""
    teams = [t.name for t in spec.teams]
    if b.team is None and len(teams) > 1:
        raise SpecError(f"buckets[{i}].team", f"the spec has {len(teams)} teams and a bucket belongs to one", f"set team to one of {', '.join(teams)}")
    if b.team is not None and b.team not in teams:
        raise SpecError(f"buckets[{i}].team", f"no team {b.team!r} in the spec", f"use one of {', '.join(teams)}")


def check_datasets(spec: EnvFields) -> None:
    names = [d.name for d in spec.datasets]
    data = [b.name for b in spec.buckets if b.purpose is BucketPurpose.DATA]
    for i, d in enumerate(spec.datasets):
        if names.index(d.name) != i:
            raise SpecError(f"datasets[{i}].name", f"dataset {d.name!r} is listed twice", "give each dataset its own name")
        bucket = next((b for b in spec.buckets if b.name == d.bucket), None)
        if bucket is None:
            fix = f"use one of {', '.join(data)}" if data else "add a bucket with purpose: data to buckets and name it here"
            raise SpecError(f"datasets[{i}].bucket", f"no bucket {shown(d.bucket)} in the spec's buckets", fix)
        if bucket.purpose is not BucketPurpose.DATA:
            raise SpecError(
                f"datasets[{i}].bucket",
                f"bucket {d.bucket!r} has purpose {bucket.purpose.value}, and runs mount only data buckets read-only",
                f"use one of {', '.join(data)}" if data else "add a bucket with purpose: data",
            )


def check_datasets_mounted(spec: EnvFields) -> None:
    if spec.datasets and not spec.cluster.gcs_fuse_csi:
        raise SpecError(
            "cluster.gcs_fuse_csi",
            "is off, and runs read the spec's datasets through the GCS FUSE CSI driver",
            "set cluster.gcs_fuse_csi: true (the default)",
        )


def check_multi_tier_checkpointing(spec: EnvFields) -> None:
    """Where GKE's multi-tier checkpointing can run, a RAM disk the VM can hold, a checkpoints bucket to back up to."""
    by_shape: dict[str, tuple[int, MultiTierCheckpointingSpec]] = {}
    for i, pool in enumerate(spec.tpu_pools):
        m = pool.multi_tier_checkpointing
        if m is None:
            continue
        where = f"tpu_pools[{i}].multi_tier_checkpointing"
        if not spec.cluster.gcs_fuse_csi:
            raise SpecError(
                "cluster.gcs_fuse_csi", "is off, and GKE's multi-tier checkpointing needs the GCS FUSE CSI driver", "set cluster.gcs_fuse_csi: true"
            )
        gen = pool.shape.generation.name
        if gen not in MTC_GENERATIONS:
            raise SpecError(
                where,
                f"GKE's multi-tier checkpointing supports TPU {', '.join(MTC_GENERATIONS)}, and pool {pool.name} is {gen}",
                "remove it from this pool",
            )
        memory = catalog.machine_size(pool.shape.machine_type).memory_gib
        if m.ramdisk_gib > memory:
            raise SpecError(
                f"{where}.ramdisk_gib",
                f"{m.ramdisk_gib} GiB is more than the {memory} GiB of memory of a {pool.shape.machine_type} VM",
                f"use at most {memory} (less, to leave the training program room)",
            )
        if spec.mtc_bucket(m) is None:
            raise SpecError(
                f"{where}.bucket",
                "names no bucket and the spec has no bucket with purpose: checkpoints",
                "add a checkpoints bucket to buckets and name it here",
            )
        bucket = next((b for b in spec.buckets if b.name == spec.mtc_bucket(m)), None)
        if bucket is None or bucket.purpose is not BucketPurpose.CHECKPOINTS:
            ckpt = [b.name for b in spec.buckets if b.purpose is BucketPurpose.CHECKPOINTS]
            raise SpecError(
                f"{where}.bucket", f"{shown(m.bucket)} is not a checkpoints bucket of the spec", f"use one of {', '.join(ckpt) or '(none: add one)'}"
            )
        seen = by_shape.get(pool.shape.key)
        if seen is not None and seen[1] != m:
            # The CheckpointConfiguration selects nodes by the shape's labels: one per shape.
            raise SpecError(
                where,
                f"differs from tpu_pools[{seen[0]}]'s of the same shape {pool.shape.key}",
                "give every pool of one shape the same multi_tier_checkpointing",
            )
        by_shape[pool.shape.key] = (i, m)


def check_lustre(spec: EnvFields) -> None:
    lu = spec.lustre
    if lu is None:
        return
    if lu.zone is not None and lu.zone not in spec.zones:
        raise SpecError(
            "lustre.zone", f"{lu.zone!r} is not one of the cluster's zones {spec.zones}", "use one of them (the instance serves the TPU slices' zone)"
        )
    if spec.network.dcn is not None and overlap(lu.peering_cidr, spec.network.dcn.cidr):
        raise SpecError("lustre.peering_cidr", f"{lu.peering_cidr} overlaps network.dcn.cidr {spec.network.dcn.cidr}", "pick a range of its own")
    for what, cidr in (("nodes", spec.cidrs.nodes), ("pods", spec.cidrs.pods), ("services", spec.cidrs.services)):
        if overlap(lu.peering_cidr, cidr):
            raise SpecError(
                "lustre.peering_cidr", f"{lu.peering_cidr} overlaps the cluster's {what} range {cidr}", "pick a private range the cluster does not use"
            )


def check_derived_names(spec: EnvFields) -> None:
    """Names made from the spec's names, against the limits of where they go.

    The names given directly are bounded by their fields' max_length; these are the
    ones a suffix or prefix is added to. (Team ClusterQueues, <name>-cq, fit: a team
    name has at most 30 characters. Node pools, <pool>-<slice>, fit GKE's 40: a pool
    name has at most 36 and slices at most 512.)
    """
    for i, t in enumerate(spec.teams):
        if t.local_queue is None and len(t.queue) > K8S_NAME_MAX:
            src = "namespace" if t.namespace else "name"
            raise SpecError(
                f"teams[{i}].{src}",
                f"makes the LocalQueue name {t.ns[:12]}...-queue, {len(t.queue)} characters; runs carry it in the "
                f"{KUEUE_QUEUE_LABEL} label, which holds at most {K8S_NAME_MAX}",
                f"shorten the {src} to at most {K8S_NAME_MAX - len('-queue')} characters or set local_queue",
            )
    if spec.cluster.private_nodes:
        for suffix in ("-router", "-nat"):  # the Cloud NAT private nodes reach the internet through
            name = f"{spec.network_name}{suffix}"
            if len(name) > GCE_NAME_MAX:
                raise SpecError(
                    "network.name",
                    f"makes the Cloud Router/NAT name {spec.network_name[:12]}...{suffix}, {len(name)} characters; GCP allows {GCE_NAME_MAX}",
                    f"shorten network.name to at most {GCE_NAME_MAX - len('-router')} characters",
                )
    accounts = ["nodes", "workload"] + (["ci"] if spec.cloud_build.enabled else [])
    for suffix in accounts:
        account = naming.service_account_id(spec.cluster.name, suffix)
        if not re.fullmatch(GCP_ID, account):
            raise SpecError(
                "cluster.name",
                f"makes the {suffix} service account id {account!r}, but GCP needs {GCP_ID_MIN}-{GCP_ID_MAX} characters",
                f"use a cluster name of at least {GCP_ID_MIN - len(suffix) - 1} characters",
            )


# ---------------------------------------------------------------- derived


def check_network(spec: EnvFields) -> None:
    cidrs = derive_cidrs(
        spec.network, spec.cluster, tpu_nodes=spec.tpu_nodes, cpu_nodes=spec.cpu_nodes
    )  # raises SpecError when given ranges are too small or overlap
    _dcn(spec, cidrs)


def _dcn(spec: EnvFields, cidrs: Cidrs) -> None:
    """The DCN network needs Dataplane V2, room for every TPU node, and its own address space."""
    dcn = spec.network.dcn
    if dcn is None:
        return
    if not spec.cluster.dataplane_v2:
        raise SpecError(
            "network.dcn",
            "GKE multi-networking needs Dataplane V2, which cluster.dataplane_v2: false turns off",
            "set cluster.dataplane_v2: true or remove network.dcn",
        )
    net = ipaddress.ip_network(dcn.cidr)
    # GCP keeps 4 addresses of every subnet; each TPU node takes one for its eth1.
    if net.num_addresses - 4 < spec.tpu_nodes:
        raise SpecError(
            "network.dcn.cidr", f"{dcn.cidr} has {net.num_addresses - 4} usable addresses for {spec.tpu_nodes} TPU nodes", "use a larger range, e.g. a /16"
        )
    for what, cidr in (("nodes", cidrs.nodes), ("pods", cidrs.pods), ("services", cidrs.services)):
        if net.overlaps(ipaddress.ip_network(cidr)):
            raise SpecError(
                "network.dcn.cidr", f"{dcn.cidr} overlaps the cluster's {what} range {cidr}", "pick a range outside the first VPC's, e.g. 10.200.0.0/16"
            )


def check_prices(spec: EnvFields) -> None:
    """A spec with a ``prices:`` section owns its pricing: it must price every pool it runs.

    Without the section, a pool the public table has no figure for shows "no price"
    (a missing public figure never blocks provisioning). With it, a row for another
    region, a repeated row, or a pool option left without any price is a mistake in
    the section, and is refused.
    """
    if spec.prices is None:
        return
    seen: dict[tuple[str, str], int] = {}
    for i, row in enumerate(spec.prices.chip_hour):
        if row.region != spec.region:
            raise SpecError(
                f"prices.chip_hour[{i}].region",
                f"{row.region!r} is not the spec's region ({spec.region}), so this row would never apply",
                f"set region: {spec.region}",
            )
        for m in row.given():
            if (row.generation, m) in seen:
                raise SpecError(
                    f"prices.chip_hour[{i}]",
                    f"repeats the {m} rate of {row.generation} given in prices.chip_hour[{seen[(row.generation, m)]}]",
                    "give each generation's rate for a mode once",
                )
            seen[(row.generation, m)] = i
    prices = Prices(load_table(), spec.prices)
    for i, pool in enumerate(spec.tpu_pools):
        gen = pool.shape.generation.name
        for o in pool.capacity_options():
            if prices.rate(gen, spec.region, o.mode) is None:
                raise SpecError(
                    "prices.chip_hour",
                    f"has no {o.mode} rate for {gen} in {spec.region}, and neither has the shipped table, "
                    f"but {option_field(i, pool, o)} ({pool.name}) needs one",
                    f"add a row with generation: {gen}, region: {spec.region} and {o.mode}: <USD per chip-hour>",
                )


def check_recovery(spec: EnvFields) -> None:
    """In-place restarts need a JobSet that has them; Kueue's timeouts must outlast what they guard (``infra.recovery``)."""
    if spec.recovery.restart == "in-place" and not spec.jobset_has_in_place_restart:
        raise SpecError(
            "recovery.restart",
            f"in-place restarts need JobSet {IN_PLACE_RESTART_MIN_JOBSET} or later (its InPlaceRestart strategy), and versions.jobset is {spec.versions.jobset}",
            f"set versions.jobset to {IN_PLACE_RESTART_MIN_JOBSET} or later (the toolkit pins {DEFAULT_JOBSET_VERSION}), or recovery.restart: recreate",
        )
    w = spec.kueue.wait_for_pods_ready
    if not w.enabled:
        return
    (start, why_start), (back, why_back) = spec.wait_for_pods_ready_needs()
    for field, given, need, why in (
        ("timeout_seconds", w.timeout_seconds, start, why_start),
        ("recovery_timeout_seconds", w.recovery_timeout_seconds, back, why_back),
    ):
        if given is not None and given < need:
            raise SpecError(
                f"kueue.wait_for_pods_ready.{field}",
                f"{given} s is shorter than what it guards: {why} = {math.ceil(need)} s, so Kueue would evict runs that are still coming up",
                f"raise it to at least {math.ceil(need)}, or leave it out for that derived default",
            )


# The rules, in the order they run: a spec with several problems is refused by the first.
RULES = (
    check_zones,
    check_pools,
    check_ironwood,
    check_flavor_count,
    check_gke_version,
    check_teams,
    check_quota_shares,
    check_buckets_and_ci,
    check_datasets,
    check_datasets_mounted,
    check_multi_tier_checkpointing,
    check_lustre,
    check_derived_names,
    derived_names.check,
    check_network,
    check_prices,
    check_recovery,
)
