"""Reading a kubeconfig: which file, which context, and the transport its user needs.

A client-certificate (or anonymous) user is served by the standard library; tokens, exec
plugins (gke-gcloud-auth-plugin), auth providers and proxies by the kubernetes client.
Every problem is one line: a file that is not text YAML is bad input (``FieldError``,
exit 2); anything else about the kubeconfig is a ``ClusterError`` (exit 3).
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ClusterError
from workloads.cluster.errors import one_line
from workloads.cluster.transport import KubeClientTransport, StdlibTransport, Tls, Transport

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
    return KubeconfigContext(path, str(name), ctx.get("namespace") or "default", cluster, entry("users", "user"))


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


def kube_client_transport(kc: KubeconfigContext, timeout: float) -> KubeClientTransport:
    """The kubernetes client's transport: tokens, exec auth plugins, auth providers."""
    try:
        from kubernetes import config as kconfig
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # pragma: no cover - the dependency is pinned
        raise ClusterError("the kubernetes Python client is not installed — run scripts/setup.sh") from None
    cfg = Configuration()
    try:
        kconfig.load_kube_config(config_file=str(kc.path), context=kc.name, client_configuration=cfg, persist_config=False)
    except ConfigException as e:
        raise ClusterError(f"kubeconfig {kc.path}: {one_line(e)} — fix the context's cluster/user entries") from None
    except Exception as e:  # exec plugins that fail, unreadable cert files
        raise ClusterError(f"kubeconfig {kc.path}: cannot load credentials: {one_line(e)}") from None
    # Fail fast instead of urllib3's default three retries per request.
    cfg.retries = False
    return KubeClientTransport(ApiClient(configuration=cfg), timeout)
