"""Apply a fleet (``infra.fleet``) to its clusters: each worker's side, the manager's kubeconfig Secrets, the manager's side.

The one flow ``queues apply --fleet`` runs against GKE and ``local up --fleet`` against the
loopback control planes. Order matters: a worker's identity must exist (and its token
be issued by the worker's token controller) before the manager can hold a kubeconfig
for it, and the manager's MultiKueueClusters are only useful once their Secrets exist.

Before anything is applied, every member is resolved to the API server it reaches
(``resolve``): each its own cluster (a member without a context of its own is reached by
the context gcloud names its cluster, never the current one), and every worker over TLS,
since the manager's Secret carries the worker's long-lived token there. Nothing here
prints a token.

``rotate`` replaces the manager's credentials on workers: a new token Secret on the worker,
the manager's Secret pointed at it, the manager's Kueue connected with it, then the old
token Secret deleted (the worker's API server then refuses its token).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.fleet import Fleet, FleetManager, Worker
from toolkit import ledger
from toolkit.errors import ClusterError, FieldError
from toolkit.names import KUEUE_API, TGK_FIELD_MANAGER
from workloads.cluster import secret_data
from workloads.cluster.cleanup import delete_toolkit_object
from workloads.cluster.client import Cluster
from workloads.cluster.wait import WaitTimeout, wait_for
from workloads.render import multikueue

TOKEN_WAIT_S = 60.0
ROTATE_ACTIVE_WAIT_S = 120.0
# kube-apiserver keeps a token's authentication result for 10 s (its token cache), and reads
# token Secrets through an informer: a deleted token is refused within seconds, not at once.
REVOKE_WAIT_S = 60.0


@dataclass(frozen=True)
class FleetApplied:
    workers: dict[str, int]  # objects applied per worker
    manager: int
    secrets: tuple[str, ...]
    active: dict[str, str]  # each MultiKueueCluster's Active condition: "True", else the reason

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "manager": self.manager, "secrets": list(self.secrets), "active": self.active}


# ------------------------------------------------------------------ where each member is


@dataclass(frozen=True)
class Reach:
    """How a member is reached: its kubeconfig file and context, and the API server they name."""

    member: str  # "manager" or the worker's name
    field: str  # the fleet file's entry: manager, workers[0]
    kubeconfig: Path | None
    context: str | None
    server: str


def _contexts(path: Path) -> set[str]:
    """The context names of the kubeconfig at ``path`` (none when it cannot be read: ``read_kubeconfig`` then says why)."""
    from toolkit.yamlfile import load_yaml, read_capped

    try:
        doc = load_yaml(read_capped(path))
    except Exception:  # noqa: BLE001 - any unreadable file: read_kubeconfig below reports it in its own words
        return set()
    items = doc.get("contexts") if isinstance(doc, dict) else None
    return {str(c.get("name")) for c in items or [] if isinstance(c, dict) and c.get("name")}


def _reach(member: str, field: str, m: Worker | FleetManager, where: tuple[str, str, str], kubeconfig: Path | None) -> Reach:
    """``where``: the member's (cluster, region, project), for the fix of a missing context."""
    from workloads.cluster import kubeconfig as kc

    path = kc.kubeconfig_path(m.kubeconfig or kubeconfig)
    context = m.reach_context
    if not path.exists():
        raise ClusterError(
            f"no kubeconfig at {path} for {field} ({member}) — pass --kubeconfig, set {field}.kubeconfig, or run gcloud container clusters get-credentials"
        )
    if context is not None and context not in _contexts(path):
        cluster, region, project = where
        how = f"the context gcloud names its cluster {cluster}" if m.context is None else "its context"
        raise FieldError(
            f"{field}.context",
            f"{member} is reached by {how}, {context!r}, which is not in {path}",
            f"run gcloud container clusters get-credentials {cluster} --region {region} --project {project}, or set {field}.context",
        )
    found = kc.read_kubeconfig(path, context)
    return Reach(member, field, m.kubeconfig or kubeconfig, found.name, str(found.cluster.get("server") or ""))


def resolve(fleet: Fleet, kubeconfig: Path | None = None) -> dict[str, Reach]:
    """Where every member is, read from the kubeconfigs (nothing sent): distinct API servers, the workers over TLS.

    A FieldError (exit 2) naming the member's field, before anything is applied: two
    members reaching one API server (a fleet applied to one cluster twice over, its
    manager its own worker), or a worker reached over plain http.
    """
    m = fleet.manager
    out = {"manager": _reach("the manager", "manager", m, (m.name, m.region, m.project), kubeconfig)}
    for w in fleet.workers:
        out[w.name] = _reach(f"worker {w.name}", w.field, w, (w.spec.cluster.name, w.spec.region, w.spec.project), kubeconfig)
        multikueue.check_tls(w.name, out[w.name].server, f"{w.field}.context")
    seen: dict[str, Reach] = {}
    for r in out.values():
        key = r.server.rstrip("/").lower()
        if key in seen:
            other = seen[key]
            raise FieldError(
                f"{r.field}.context",
                f"{r.member} is reached through context {r.context!r} at the API server {other.member} is reached at (context {other.context!r}); "
                "every member must be a cluster of its own",
                f"set {r.field}.context (or .kubeconfig) to reach its own cluster",
            )
        seen[key] = r
    return out


def connect(fleet: Fleet, kubeconfig: Path | None = None) -> tuple[Cluster, dict[str, Cluster]]:
    """The manager's client and each worker's, once ``resolve`` found every member distinct and the workers on TLS."""
    reach = resolve(fleet, kubeconfig)

    def one(r: Reach) -> Cluster:
        return Cluster.connect(r.kubeconfig, r.context)

    return one(reach["manager"]), {w.name: one(reach[w.name]) for w in fleet.workers}


# ------------------------------------------------------------------ the identity's token on a worker


def _secret_info(kube: Cluster) -> Any:
    return kube.resource("v1", "Secret")


def token_secrets(worker: Cluster) -> list[dict[str, Any]]:
    """The identity's token Secrets on ``worker`` (the toolkit's, by label), oldest first."""
    found = worker.list(_secret_info(worker), multikueue.KUEUE_NAMESPACE, label_selector=f"{multikueue.TOKEN_LABEL}={multikueue.IDENTITY}")
    return sorted(found, key=lambda s: (s["metadata"].get("creationTimestamp") or "", s["metadata"]["name"]))


def current_token_secret(worker: Cluster) -> str:
    """The token Secret the manager should hold: the newest of the identity's, created (``token_secret``) when there is none."""
    found = token_secrets(worker)
    if found:
        return found[-1]["metadata"]["name"]
    worker.apply([multikueue.token_secret()], field_manager=TGK_FIELD_MANAGER)
    return multikueue.IDENTITY


def worker_token(worker: Cluster, name: str = multikueue.IDENTITY, *, timeout: float = TOKEN_WAIT_S) -> tuple[str, bytes]:
    """The token and CA in token Secret ``name`` on ``worker``, once its token controller has filled it."""
    info = _secret_info(worker)
    where = f"{multikueue.KUEUE_NAMESPACE}/{name}"

    def filled() -> Mapping[str, Any] | None:
        data = secret_data.data_of(worker.get(info, name, multikueue.KUEUE_NAMESPACE))
        return data if data and data.get("token") and data.get("ca.crt") else None

    try:
        data = wait_for(filled, timeout=timeout, what=f"the token of {where}", interval=0.5)
    except WaitTimeout:
        raise ClusterError(
            f"the worker's token controller did not fill {where} within {timeout:.0f}s — check kube-controller-manager runs with a service account key"
        ) from None
    token, ca = secret_data.value(data, "token", where, text=True), secret_data.value(data, "ca.crt", where)
    if not ca.startswith(b"-----BEGIN CERTIFICATE-----"):
        raise ClusterError(f"the Secret {where} holds a 'ca.crt' that is no PEM certificate — check the Secret {where} (delete it to have it filled again)")
    return token, ca


def _write_manager_secret(manager: Cluster, w: Worker, worker: Cluster, source: str) -> str:
    """The manager's kubeconfig Secret for ``w`` with the token of its token Secret ``source``; the Secret's name."""
    token, ca = worker_token(worker, source)
    config = multikueue.kubeconfig(w.name, worker.transport.server, ca, token, field=f"{w.field}.context")
    manager.apply([multikueue.kubeconfig_secret(w.name, config, token_source=source)], field_manager=TGK_FIELD_MANAGER)
    return f"{multikueue.KUEUE_NAMESPACE}/{Fleet.secret_name(w.name)}"


def apply_fleet(fleet: Fleet, manager: Cluster, workers: dict[str, Cluster], *, progress: Callable[[str], None] = lambda m: None) -> FleetApplied:
    for w in fleet.workers:  # TLS before any object anywhere: the Secrets carry the workers' tokens
        multikueue.check_tls(w.name, workers[w.name].transport.server, f"{w.field}.context")
    counts: dict[str, int] = {}
    secrets_written = []
    for w in fleet.workers:
        kube = workers[w.name]
        objs = multikueue.worker_objects(fleet, w)
        progress(f"worker {w.name}: applying {len(objs)} objects (its queues and the manager's identity)")
        kube.apply(objs, field_manager=TGK_FIELD_MANAGER)
        counts[w.name] = len(objs)
        secrets_written.append(_write_manager_secret(manager, w, kube, current_token_secret(kube)))
        progress(f"manager: kubeconfig Secret {secrets_written[-1]} for worker {w.name} ({kube.transport.server})")
    mobjs = multikueue.manager_objects(fleet)
    progress(f"manager: applying {len(mobjs)} objects (MultiKueue check, config, clusters, queues)")
    manager.apply(mobjs, field_manager=TGK_FIELD_MANAGER)
    return FleetApplied(counts, len(mobjs), tuple(secrets_written), clusters_active(manager, fleet))


# ------------------------------------------------------------------ rotating the manager's credentials


@dataclass(frozen=True)
class Rotated:
    worker: str
    token_secret: str  # the worker's new token Secret (kueue-system)
    revoked: tuple[str, ...]  # the token Secrets deleted: their tokens no longer authenticate
    active: str  # the MultiKueueCluster's Active condition after

    def to_dict(self) -> dict[str, Any]:
        # A Secret's name is no credential, but a key ending in "secret" would be redacted as one (toolkit.credentials).
        return {"worker": self.worker, "new_secret_name": self.token_secret, "revoked": list(self.revoked), "active": self.active}


def rotate(
    fleet: Fleet,
    manager: Cluster,
    workers: dict[str, Cluster],
    names: list[str] | None = None,
    *,
    progress: Callable[[str], None] = lambda m: None,
    active_timeout: float = ROTATE_ACTIVE_WAIT_S,
) -> list[Rotated]:
    """Replace the manager's token on each worker named (default: all), one worker at a time.

    For each: a new token Secret on the worker; the manager's kubeconfig Secret rewritten
    with its token (Kueue reloads a MultiKueueCluster's Secret when it changes); the
    MultiKueueCluster Active again; then every older token Secret of the identity deleted,
    which revokes those tokens, and the token the manager held before tried against the
    worker until the worker refuses it. A worker whose cluster does not come back Active
    keeps its old token (nothing is revoked) and the rotation stops there with a
    ClusterError; so does an old token the worker still takes after ``REVOKE_WAIT_S``.
    """
    chosen = [fleet.worker(n) for n in names] if names else list(fleet.workers)
    for w in chosen:
        multikueue.check_tls(w.name, workers[w.name].transport.server, f"{w.field}.context")
    done = []
    for w in chosen:
        kube = workers[w.name]
        old = [s["metadata"]["name"] for s in token_secrets(kube)]
        held = manager_kubeconfig(manager, w.name)  # the credential being replaced
        new = f"{multikueue.IDENTITY}-{secrets.token_hex(3)}"
        kube.create(multikueue.token_secret(new), field_manager=TGK_FIELD_MANAGER)
        progress(f"worker {w.name}: new token Secret {multikueue.KUEUE_NAMESPACE}/{new}")
        where = _write_manager_secret(manager, w, kube, new)
        progress(f"manager: kubeconfig Secret {where} now holds the new token")
        state = _wait_one_active(manager, w.name, active_timeout)
        if state != "True":
            raise ClusterError(
                f"worker {w.name}'s MultiKueueCluster is not Active with the new token ({state}); the old token Secret(s) {', '.join(old) or '(none)'} are kept — "
                f"check the manager reaches the worker, then rotate again"
            )
        info = _secret_info(kube)
        for name in old:
            ns = multikueue.KUEUE_NAMESPACE
            verdict = ledger.toolkit_object(kube.get(info, name, ns), kind="Secret", name=name, namespace=ns)
            if isinstance(verdict, ledger.Kept):
                progress(f"worker {w.name}: {verdict.what} kept ({verdict.why})")
                continue
            delete_toolkit_object(kube, info, "Secret", name, ns, verdict)
        if held is not None:
            try:
                wait_for(lambda h=held: token_refused(h), timeout=REVOKE_WAIT_S, what=f"worker {w.name} refusing the old token", interval=1.0)
            except WaitTimeout:
                raise ClusterError(
                    f"worker {w.name} still accepts the manager's old token {REVOKE_WAIT_S:.0f}s after its Secret was deleted — check the API server runs with --service-account-lookup"
                ) from None
        progress(f"worker {w.name}: revoked {', '.join(old) or 'nothing (no older token)'}; the worker refuses the old token")
        # Active again once the old token is gone: the manager's Kueue holds the new one.
        done.append(Rotated(w.name, new, tuple(old), _wait_one_active(manager, w.name, active_timeout)))
    return done


def manager_kubeconfig(manager: Cluster, worker: str) -> str | None:
    """The kubeconfig the manager's Kueue holds for ``worker`` (its Secret), None when there is none readable."""
    data = secret_data.data_of(manager.get(_secret_info(manager), Fleet.secret_name(worker), multikueue.KUEUE_NAMESPACE))
    if not data:
        return None
    try:
        return secret_data.value(data, "kubeconfig", f"{multikueue.KUEUE_NAMESPACE}/{Fleet.secret_name(worker)}").decode()
    except (ClusterError, UnicodeDecodeError):
        return None  # not one the flow wrote: there is no old token to try


def token_refused(config: str, *, timeout: float = 10) -> bool:
    """Whether the worker refuses the credential in ``config`` (a kubeconfig as ``multikueue.kubeconfig`` writes it): 401."""
    from toolkit.yamlfile import YamlFileError, load_yaml
    from workloads.cluster import kubeconfig as kc

    try:
        doc = load_yaml(config)
        (user,), (cluster,) = doc["users"], doc["clusters"]
        ctx = kc.KubeconfigContext(Path("."), doc["current-context"], "default", cluster["cluster"], user["user"], doc, user["name"])
    except (YamlFileError, KeyError, TypeError, ValueError):
        return False  # not one the flow wrote: nothing to try
    try:
        Cluster(kc.kube_client_transport(ctx, timeout)).server_version()
    except ClusterError as e:
        return e.status == 401
    return False


def _wait_one_active(manager: Cluster, name: str, timeout: float) -> str:
    info = manager.resource(KUEUE_API, "MultiKueueCluster")

    def state() -> str:
        obj = manager.get(info, name) or {}
        cond = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
        return "True" if cond and cond.get("status") == "True" else (f"{cond.get('reason')}: {cond.get('message')}" if cond else "no status yet")

    try:
        wait_for(lambda: state() == "True" or None, timeout=timeout, what=f"MultiKueueCluster {name} active", interval=0.5)
    except WaitTimeout:
        pass
    return state()


# ------------------------------------------------------------------ the manager's view


def clusters_active(manager: Cluster, fleet: Fleet) -> dict[str, str]:
    """Each worker's MultiKueueCluster ``Active`` condition on the manager: "True", or its reason and message."""
    info = manager.resource(KUEUE_API, "MultiKueueCluster")
    out = {}
    for w in fleet.workers:
        obj = manager.get(info, w.name) or {}
        cond = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
        out[w.name] = "True" if cond and cond.get("status") == "True" else (f"{cond.get('reason')}: {cond.get('message')}" if cond else "no status yet")
    return out


def wait_active(manager: Cluster, fleet: Fleet, *, timeout: float) -> dict[str, str]:
    """Until every worker's MultiKueueCluster is Active (the manager's Kueue reached it with its kubeconfig)."""
    try:
        wait_for(lambda: all(v == "True" for v in clusters_active(manager, fleet).values()), timeout=timeout, what="MultiKueueClusters active", interval=0.5)
    except WaitTimeout:
        pass
    return clusters_active(manager, fleet)


def landed_on(manager: Cluster, namespace: str, run: str) -> str | None:
    """The worker the manager dispatched ``run`` to (its Workload's ``status.clusterName``), None while it waits."""
    found = manager.find_run(namespace, run)
    if found is None:
        return None
    wl = manager.workload_for(namespace, found[1]) or {}
    return ((wl.get("status") or {}).get("clusterName")) or None


def follow(fleet: Fleet, manager: Cluster, namespace: str, run: str, kubeconfig: Any = None) -> tuple[Cluster, str | None]:
    """Where a run's pods are: the worker it landed on (connected through the fleet file), else the manager."""
    name = landed_on(manager, namespace, run)
    if name is None:
        return manager, None
    w = fleet.worker(name)
    worker = Cluster.connect(w.kubeconfig or kubeconfig, w.reach_context)
    # A finished run's copy is removed from the worker once its status is mirrored back:
    # the manager then holds all there is.
    return (worker if worker.find_run(namespace, run) is not None else manager), name
