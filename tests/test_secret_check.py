"""Before a run is applied, each Secret it reads (``--secret-env``) is asked for by name, its metadata only.

On GKE a pod whose ``secretKeyRef`` names a Secret that is not there waits in
CreateContainerConfigError with the slice held; ``submit`` refuses that run first (one line
naming ``--secret-env``, nothing applied). Not allowed to ask is a warning, not a refusal. The
values are never fetched: the request asks for ``PartialObjectMetadata``, and a server that
sends the whole object anyway has all but the metadata dropped. Against the real API server:
tests/integration/test_secure_defaults.py.
"""

from __future__ import annotations

import base64
import json

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from tests.support.recording_cluster import RecordingCluster
from tests.test_cluster import FakeTransport
from toolkit.errors import FieldError, Forbidden
from workloads import runs
from workloads.cluster.api import PARTIAL_METADATA
from workloads.cluster.client import Cluster
from workloads.cluster.transport import Response
from workloads.planning.overrides import Overrides

pytestmark = pytest.mark.usefixtures("memory_buckets")
SECRETS = "/api/v1/namespaces/research/secrets"


def _plan(*refs: str):
    return runs.plan("hello-tpu", load_spec(EXAMPLES_DIR / "default.yaml"), Overrides(name="sec", secret_env=refs))


class _Recording(RecordingCluster, Cluster):
    """The recording stand-in (nothing under the name; apply recorded, never sent) over the real client and a fake transport."""

    def __init__(self, routes: dict) -> None:
        Cluster.__init__(self, FakeTransport(routes), context=RecordingCluster.context)
        RecordingCluster.__init__(self)


def _secret(name: str) -> dict:
    return {"kind": "Secret", "metadata": {"name": name, "namespace": "research"}, "data": {"token": base64.b64encode(b"hf_value").decode()}}


def test_metadata_asks_for_partial_object_metadata_and_keeps_no_values() -> None:
    c = Cluster(FakeTransport({("GET", f"{SECRETS}/hf-token"): _secret("hf-token")}))
    got = c.metadata(c.resource("v1", "Secret"), "hf-token", "research")
    assert got == {"kind": "PartialObjectMetadata", "metadata": {"name": "hf-token", "namespace": "research"}}
    assert "hf_value" not in json.dumps(got) and base64.b64encode(b"hf_value").decode() not in json.dumps(got)
    (call,) = c.transport.calls
    assert call["accept"] == PARTIAL_METADATA
    assert c.metadata(c.resource("v1", "Secret"), "missing", "research") is None


def test_a_run_reading_a_missing_secret_is_refused_and_nothing_is_applied() -> None:
    cluster = _Recording({("GET", f"{SECRETS}/hf-token"): _secret("hf-token")})
    plan = _plan("HF_TOKEN=hf-token/token", "WANDB_API_KEY=wandb/key", "M_OTHER=wandb/other")
    with pytest.raises(FieldError) as e:
        runs.apply(cluster, plan)
    assert e.value.field == "--secret-env"
    line = str(e.value)
    assert line == (
        "--secret-env: the Secret wandb (WANDB_API_KEY and M_OTHER read it) does not exist in namespace research — create it first "
        "(kubectl create secret generic wandb -n research --from-literal=key=... --from-literal=other=...), or name a Secret that exists"
    ), line
    assert cluster.applied == []
    # One question per Secret, each for its metadata only.
    gets = [c for c in cluster.transport.calls if c["path"].startswith(SECRETS)]
    assert sorted(c["path"] for c in gets) == [f"{SECRETS}/hf-token", f"{SECRETS}/wandb"]
    assert all(c["accept"] == PARTIAL_METADATA for c in gets)


def test_a_run_whose_secrets_exist_is_applied_without_a_warning() -> None:
    cluster = _Recording({("GET", f"{SECRETS}/hf-token"): _secret("hf-token")})
    sub = runs.apply(cluster, _plan("HF_TOKEN=hf-token/token"))
    assert sub.applied and cluster.applied and sub.secrets == ""


def test_not_allowed_to_ask_is_a_warning_and_the_run_is_applied() -> None:
    forbidden = Response(403, json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": 'secrets "hf-token" is forbidden'}).encode())
    cluster = _Recording({("GET", f"{SECRETS}/hf-token"): forbidden})
    sub = runs.apply(cluster, _plan("HF_TOKEN=hf-token/token"))
    assert cluster.applied
    assert sub.secrets.startswith("cannot check that the Secret(s) hf-token exist in namespace research (not allowed to get secrets there)")
    with pytest.raises(Forbidden):  # the client itself says what it was told
        cluster.metadata(cluster.resource("v1", "Secret"), "hf-token", "research")


def test_a_run_reading_no_secret_asks_nothing() -> None:
    cluster = _Recording({})
    runs.apply(cluster, runs.plan("hello-tpu", load_spec(EXAMPLES_DIR / "default.yaml"), Overrides(name="sec")))
    assert not [c for c in cluster.transport.calls if "/secrets" in c["path"]]


def test_both_transports_send_the_metadata_accept_header_over_http(tmp_path) -> None:
    """The kubernetes client's transport (kubeconfig) and the stdlib one each put ``accept`` on the wire."""
    from tests.support.fake_apiserver import serve
    from workloads.cluster.transport import StdlibTransport, Tls

    with serve() as api:
        api.json("GET", f"{SECRETS}/hf-token", _secret("hf-token"))
        via_kubeconfig = Cluster.connect(api.kubeconfig(tmp_path, namespace="research"))
        via_stdlib = Cluster(StdlibTransport(api.url, Tls(), 10))
        for c in (via_kubeconfig, via_stdlib):
            assert c.metadata(c.resource("v1", "Secret"), "hf-token", "research")["metadata"]["name"] == "hf-token"
            assert c.get(c.resource("v1", "Secret"), "hf-token", "research")["kind"] == "Secret"  # plain JSON otherwise
    accepts = [s["accept"] for s in api.seen if s["path"] == f"{SECRETS}/hf-token"]
    assert accepts == [PARTIAL_METADATA, "application/json"] * 2, accepts
