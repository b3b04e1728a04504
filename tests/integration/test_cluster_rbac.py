"""The typed cluster errors against the real API server: its RBAC, its admission, its conflicts.

A user of the local cluster's own CA (``certs.write_client_cert``) with a namespaced Role of
the test's choosing: where RBAC refuses a read, ``status`` says which verb on which resource
is missing and how to check it (exit 3), never that the run does not exist — also when the
refused read is the run's Kueue Workload, which the untyped client silently left out.
Pod Security's 403 is admission (Rejected), not RBAC; a second create is a Conflict.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest
import yaml

from tests.support import run_module
from tests.support.local_cluster import wait_for
from toolkit.errors import Conflict, Forbidden
from toolkit.names import TGK_FIELD_MANAGER
from workloads.cluster.client import Cluster
from workloads.local import certs

READER = "tgk-test-reader"


@pytest.fixture(scope="module")
def rbac_ns(local_cluster, tmp_path_factory) -> tuple[str, Cluster, Path]:
    """(namespace, admin client, the reader's kubeconfig): the reader may read pods there and nothing else yet."""
    admin = local_cluster.client()
    ns = f"tgk-rbac-{secrets.token_hex(3)}"
    tmp = tmp_path_factory.mktemp("rbac")
    cert, key = certs.write_client_cert(certs.Pki(local_cluster.state_dir / "pki"), tmp, READER)
    server = yaml.safe_load(local_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    kubeconfig = tmp / "reader.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "local", "cluster": {"server": server, "certificate-authority-data": b64(certs.Pki(local_cluster.state_dir / "pki").ca_cert)}}
                ],
                "users": [{"name": READER, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
                "contexts": [{"name": "reader", "context": {"cluster": "local", "user": READER, "namespace": ns}}],
                "current-context": "reader",
            }
        )
    )
    admin.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}], field_manager=TGK_FIELD_MANAGER)
    _grant(admin, ns, "pods-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    reader = Cluster.connect(kubeconfig)
    wait_for(lambda: _can(reader, lambda: reader.list(reader.resource("v1", "Pod"), ns)), 30, "the reader's Role to take effect")
    try:
        yield ns, admin, kubeconfig
    finally:
        admin.delete(admin.resource("v1", "Namespace"), ns, propagation="Background")


def _grant(admin: Cluster, ns: str, name: str, rules: list[dict]) -> None:
    admin.apply(
        [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": READER}],
            },
        ],
        field_manager=TGK_FIELD_MANAGER,
    )


def _can(client: Cluster, call) -> bool:
    try:
        call()
        return True
    except Forbidden:
        return False


def test_status_of_a_run_the_user_may_not_read_is_forbidden_not_missing(rbac_ns) -> None:
    ns, admin, kubeconfig = rbac_ns
    run = "r-nowhere"
    # The admin sees that no such run exists ...
    assert admin.run_status(ns, run).phase.value == "NotFound"
    # ... the reader is told what it may not do, and how to check it.
    reader = Cluster.connect(kubeconfig)
    with pytest.raises(Forbidden) as e:
        reader.run_status(ns, run)
    assert e.value.status == 403
    assert f"lacks RBAC permission to get jobsets.jobset.x-k8s.io in namespace {ns}" in str(e.value)
    r = run_module("workloads", "status", run, "-n", ns, "--kubeconfig", str(kubeconfig), timeout=120)
    assert r.returncode == 3, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: get JobSet {run}: forbidden (")
    assert f"(check: kubectl auth can-i get jobsets.jobset.x-k8s.io -n {ns})" in line and "NotFound" not in r.stdout
    r = run_module("workloads", "delete", run, "-n", ns, "--yes", "--kubeconfig", str(kubeconfig), timeout=120)
    assert r.returncode == 3 and "already deleted" not in r.stdout and "forbidden" in r.stderr, (r.stdout, r.stderr)


def test_a_refused_workload_read_is_named_not_left_out(rbac_ns) -> None:
    ns, admin, kubeconfig = rbac_ns
    _grant(admin, ns, "jobsets-reader", [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list"]}])
    reader = Cluster.connect(kubeconfig)
    wait_for(lambda: _can(reader, lambda: reader.jobset(ns, "any")), 30, "the jobsets Role to take effect")
    # A suspended JobSet without a queue: nothing runs, Kueue leaves it alone.
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "r-held", "namespace": ns},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
                }
            ],
        },
    }
    admin.apply([js], field_manager=TGK_FIELD_MANAGER)
    assert admin.run_status(ns, "r-held").phase.value != "NotFound"
    with pytest.raises(Forbidden) as e:
        reader.run_status(ns, "r-held")
    assert f"to list workloads.kueue.x-k8s.io in namespace {ns}" in str(e.value)


def test_a_second_create_is_a_conflict_and_a_gone_delete_is_normal(rbac_ns) -> None:
    ns, admin, _ = rbac_ns
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice", "namespace": ns}, "data": {"a": "1"}}
    admin.create(cm)
    with pytest.raises(Conflict, match=r'configmaps "twice" already exists \(HTTP 409\)') as e:
        admin.create(cm)
    assert e.value.status == 409
    info = admin.resource("v1", "ConfigMap")
    # Background: no foregroundDeletion finalizer keeps it for the garbage collector to finish.
    assert admin.delete(info, "twice", ns, propagation="Background").deleted is True
    assert admin.delete(info, "twice", ns, propagation="Background").deleted is False
