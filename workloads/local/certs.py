"""The local cluster's private PKI: one CA, the apiserver's serving certificate,
client certificates for each control-plane identity, and the service-account
signing key.

Everything is created once per state directory and reused by later ``up``s, so a
kubeconfig handed out earlier stays valid. EC P-256 keys: generating them is
instant, and every component here accepts them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The Service CIDR given to the apiserver; its first address is the in-cluster
# `kubernetes` Service, which must be in the serving certificate.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"

_VALIDITY = dt.timedelta(days=3650)

# (file stem, common name, organisation): who each client certificate speaks as.
# The controller-manager and scheduler use their own identities so the default
# RBAC bootstrap policy applies to them exactly as in a real cluster.
CLIENTS: tuple[tuple[str, str, str | None], ...] = (
    ("admin", "tgk-admin", "system:masters"),
    ("controller-manager", "system:kube-controller-manager", None),
    ("scheduler", "system:kube-scheduler", None),
)


def _file(name: str) -> property:
    """A file of the PKI directory, by name."""
    return property(lambda pki: pki.dir / name)


@dataclass(frozen=True)
class Pki:
    dir: Path

    ca_cert = _file("ca.crt")
    ca_key = _file("ca.key")
    serving_cert = _file("apiserver.crt")  # kube-apiserver's serving certificate
    serving_key = _file("apiserver.key")
    sa_key = _file("sa.key")  # signs and verifies ServiceAccount tokens
    sa_pub = _file("sa.pub")

    def client_cert(self, who: str) -> Path:
        return self.dir / f"{who}.crt"

    def client_key(self, who: str) -> Path:
        return self.dir / f"{who}.key"

    @property
    def complete(self) -> bool:
        needed = [self.ca_cert, self.ca_key, self.serving_cert, self.serving_key, self.sa_key, self.sa_pub]
        needed += [self.client_cert(w) for w, _, _ in CLIENTS] + [self.client_key(w) for w, _, _ in CLIENTS]
        return all(p.is_file() for p in needed)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    # Created 0600: a key is never readable by others, not even between write and chmod.
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Digital signatures only; a CA's key also signs certificates and revocation lists."""
    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=False,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    # Back-dated a minute: the components compare against their own clocks.
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    *,
    server: bool,
    dns: list[str] = (),  # type: ignore[assignment]
    ips: list[str] = (),  # type: ignore[assignment]
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _new_key()
    b = _builder(subject, ca_cert.subject, key.public_key())
    b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    b = b.add_extension(_key_usage(ca=False), critical=True)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def ensure_pki(directory: Path) -> Pki:
    """Create the PKI under ``directory`` unless it is already complete."""
    pki = Pki(directory)
    if pki.complete:
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)

    ca_key = _new_key()
    ca_name = _name("tgk-local-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca_cert)

    key, cert = _leaf(
        ca_key,
        ca_cert,
        _name("kube-apiserver"),
        server=True,
        dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"],
        ips=["127.0.0.1", KUBERNETES_SERVICE_IP],
    )
    _write_key(pki.serving_key, key)
    _write_cert(pki.serving_cert, cert)

    for who, cn, org in CLIENTS:
        key, cert = _leaf(ca_key, ca_cert, _name(cn, org), server=False)
        _write_key(pki.client_key(who), key)
        _write_cert(pki.client_cert(who), cert)

    sa = _new_key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def write_webhook_cert(pki: Pki, cert_dir: Path, dns_name: str) -> bytes:
    """A serving cert for ``dns_name`` signed by the cluster CA, as tls.crt/tls.key in
    ``cert_dir``; returns the CA bundle (PEM) the webhook configurations must trust.

    For controllers whose own rotator cannot be pointed at a private cert dir
    (JobSet v0.10 checks a fixed /tmp path, shared by every cluster on the machine).
    """
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key, cert = _leaf(ca_key, ca_cert, _name(dns_name), server=True, dns=[dns_name])  # type: ignore[arg-type]
    cert_dir.mkdir(parents=True, exist_ok=True)
    _write_key(cert_dir / "tls.key", key)
    _write_cert(cert_dir / "tls.crt", cert)
    return pki.ca_cert.read_bytes()


def write_client_cert(pki: Pki, out_dir: Path, common_name: str, organisation: str | None = None) -> tuple[Path, Path]:
    """A client certificate signed by the cluster CA for user ``common_name`` (group ``organisation``),
    written to ``out_dir`` as ``<common_name>.crt``/``.key``; returns (cert, key).

    An identity the bootstrap RBAC grants nothing beyond discovery, for speaking to the
    cluster as a user whose Roles are chosen (the API server trusts any cert of its client CA).
    """
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key, cert = _leaf(ca_key, ca_cert, _name(common_name, organisation), server=False)  # type: ignore[arg-type]
    out_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out_dir / f"{common_name}.crt", out_dir / f"{common_name}.key"
    _write_key(key_path, key)
    _write_cert(cert_path, cert)
    return cert_path, key_path
