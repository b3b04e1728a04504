"""Reading a kubeconfig: which file, which context, and the transport its user needs.

A client-certificate (or anonymous) user is served by the standard library; tokens, exec
plugins (gke-gcloud-auth-plugin), auth providers and proxies by the kubernetes client. An
exec plugin is run here, within the request deadline (``credentials``), not by the client
(which would wait for it forever), and run again when its credential expires.
Every problem is one line: a file that is not text YAML is bad input (``FieldError``,
exit 2); anything else about the kubeconfig is a ``ClusterError`` (exit 3).
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import ClusterError
from workloads.cluster.credentials import ExecCredential, run_plugin
from workloads.cluster.errors import one_line
from workloads.cluster.transport import KubeClientTransport, StdlibTransport, Tls, Transport, request_deadline, within

__all__ = ["KubeconfigContext", "kube_client_transport", "kubeconfig_path", "read_kubeconfig", "stdlib_transport", "transport_for"]

# What the standard-library transport understands; anything else (tokens, exec plugins,
# auth providers, proxies) goes to the kubernetes client.
_STDLIB_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data"}
_STDLIB_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "extensions"}


@dataclass(frozen=True)
class KubeconfigContext:
    path: Path
    name: str
    namespace: str
    cluster: dict
    user: dict
    document: dict = field(default_factory=dict, repr=False, compare=False)  # the whole kubeconfig, as read
    user_name: str | None = None


def kubeconfig_path(kubeconfig: Path | None) -> Path:
    """The file to read: the argument, else $KUBECONFIG's first entry, else ~/.kube/config."""
    if kubeconfig:
        return Path(kubeconfig).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first).expanduser() if first else Path("~/.kube/config").expanduser()


def read_kubeconfig(path: Path, context: str | None) -> KubeconfigContext:
    """The chosen context of one kubeconfig file, with its cluster and user entries."""
    import yaml

    from toolkit.errors import ToolkitError
    from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

    fix = "check the file or pass another --kubeconfig"
    try:
        # The spec's reader: refuses binary, gzip and UTF-16 files with one line.
        doc = load_yaml(read_capped(path))
    except YamlFileError as e:
        # The file the flag names is not text YAML: bad input (exit 2), not a cluster problem.
        from toolkit.errors import FieldError

        where = f" ({e.key_path})" if e.key_path else ""
        raise FieldError("--kubeconfig", f"{path}{where} {e.problem}", e.fix) from None
    except (OSError, yaml.YAMLError, ToolkitError) as e:
        raise ClusterError(f"kubeconfig {path} cannot be read: {one_line(e)} — {fix}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"kubeconfig {path} is not usable: it is not a kubeconfig (a YAML mapping) — {fix}")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    known = ", ".join(str(n) for n in contexts if n)
    if context and context not in contexts:
        raise ClusterError(f"context {context!r} is not in {path}; contexts there: {known or 'none'}")
    name = context or doc.get("current-context")
    if not name:
        raise ClusterError(f"{path} has no current-context — pass --context ({known or 'no contexts defined'})")
    if name not in contexts:
        raise ClusterError(f"kubeconfig {path} is not usable: current-context {name!r} is not defined (contexts: {known or 'none'}) — {fix}")
    ctx = contexts[name]

    def entry(section: str, key: str) -> dict:
        wanted = ctx.get(key)
        for item in doc.get(section) or []:
            if isinstance(item, dict) and item.get("name") == wanted:
                return item.get(key) or {}
        return {}

    cluster = entry("clusters", "cluster")
    if not cluster.get("server"):
        raise ClusterError(f"kubeconfig {path}: context {name!r} has no cluster with a server — fix the context's cluster/user entries")
    return KubeconfigContext(path, str(name), ctx.get("namespace") or "default", cluster, entry("users", "user"), doc, ctx.get("user"))


def transport_for(kc: KubeconfigContext, timeout: float) -> Transport:
    """The standard library's transport where it can serve the context's user, else the kubernetes client's."""
    return stdlib_transport(kc, timeout) or kube_client_transport(kc, timeout)


def stdlib_transport(kc: KubeconfigContext, timeout: float) -> StdlibTransport | None:
    """The standard-library transport for a client-certificate (or anonymous) context, else None."""
    if not set(kc.user) <= _STDLIB_USER_KEYS or not set(kc.cluster) <= _STDLIB_CLUSTER_KEYS:
        return None

    def file(entry: dict, key: str) -> Path | None:
        value = entry.get(key)
        return (kc.path.parent / Path(value).expanduser()) if value else None

    def data(entry: dict, key: str) -> bytes | None:
        value = entry.get(f"{key}-data")
        if not value:
            return None
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ClusterError(f"kubeconfig {kc.path}: {key}-data of context {kc.name!r} is not base64 — fix the context's cluster/user entries") from None

    tls = Tls(
        ca_file=file(kc.cluster, "certificate-authority"),
        ca_data=data(kc.cluster, "certificate-authority"),
        cert_file=file(kc.user, "client-certificate"),
        cert_data=data(kc.user, "client-certificate"),
        key_file=file(kc.user, "client-key"),
        key_data=data(kc.user, "client-key"),
        insecure=bool(kc.cluster.get("insecure-skip-tls-verify")),
    )
    if bool(tls.cert_file or tls.cert_data) != bool(tls.key_file or tls.key_data):
        raise ClusterError(f"kubeconfig {kc.path}: user of context {kc.name!r} has a client certificate without its key, or a key without its certificate")
    return StdlibTransport(kc.cluster["server"], tls, timeout)


def _with_credential(kc: KubeconfigContext, cred: ExecCredential) -> dict[str, Any]:
    """The kubeconfig with the context's user holding ``cred`` in place of its exec entry."""
    user: dict[str, Any] = {k: v for k, v in kc.user.items() if k != "exec"}
    if cred.token is not None:
        user["token"] = cred.token
    else:
        user["client-certificate-data"] = base64.b64encode(str(cred.client_certificate).encode()).decode()
        user["client-key-data"] = base64.b64encode(str(cred.client_key).encode()).decode()
    doc = copy.deepcopy(kc.document)
    doc["users"] = [{**item, "user": user} if isinstance(item, dict) and item.get("name") == kc.user_name else item for item in doc.get("users") or []]
    return doc


def kube_client_transport(kc: KubeconfigContext, timeout: float) -> KubeClientTransport:
    """The kubernetes client's transport: tokens, exec auth plugins, auth providers.

    Loading runs within the request deadline: an auth provider may call the network or a
    command of its own (the deprecated ``auth-provider: gcp`` with ``cmd-path``).
    """
    try:
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.kube_config import KubeConfigLoader
    except ImportError:  # pragma: no cover - the dependency is pinned
        raise ClusterError("the kubernetes Python client is not installed — run scripts/setup.sh") from None
    deadline = request_deadline()
    exec_config = kc.user.get("exec")
    cred = run_plugin(exec_config, kc.cluster, kc.path, deadline) if exec_config is not None else None
    doc = _with_credential(kc, cred) if cred is not None else copy.deepcopy(kc.document)
    cfg = Configuration()
    try:
        loader = KubeConfigLoader(config_dict=doc, active_context=kc.name, config_base_path=str(kc.path.parent))
        within(deadline, lambda: loader.load_and_set(cfg), lambda _: None, str(kc.cluster.get("server")))
    except ConfigException as e:
        raise ClusterError(f"kubeconfig {kc.path}: {one_line(e)} — fix the context's cluster/user entries") from None
    except ClusterError:
        raise
    except Exception as e:  # unreadable cert files, an auth provider that failed
        raise ClusterError(f"kubeconfig {kc.path}: cannot load credentials: {one_line(e)}") from None
    # Fail fast instead of urllib3's default three retries per request.
    cfg.retries = False
    before = None
    if cred is not None and cred.token is not None:
        current = [cred]
        cfg.refresh_api_key_hook = None  # the loader's hook would put back the first token

        def before() -> None:
            if current[0].expired():
                current[0] = run_plugin(exec_config, kc.cluster, kc.path, deadline)
                if current[0].token is not None:
                    cfg.api_key["BearerToken"] = f"Bearer {current[0].token}"

    return KubeClientTransport(ApiClient(configuration=cfg), timeout, deadline, before)
