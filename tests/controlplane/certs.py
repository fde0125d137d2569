"""The control plane's throwaway PKI: one CA, serving certificates for the apiserver and kwok's
kubelet endpoint, client certificates per component, and the service-account signing key.

Everything is written under one folder and lives for one test session.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP in SERVICE_RANGE
SERVICE_RANGE = "10.96.0.0/16"


@dataclasses.dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path
    apiserver: Pair
    kubelet_serving: Pair  # kwok's endpoint, where the apiserver sends exec and logs
    kubelet_client: Pair  # the apiserver's identity towards that endpoint
    admin: Pair  # system:masters: the tests' own setup, kubectl's view
    controller_manager: Pair
    scheduler: Pair
    kwok: Pair
    service_account_key: Path
    service_account_public: Path


def _name(common: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                         key_encipherment=not ca, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    end = start + dt.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("runbook-controlplane-ca"))
          .issuer_name(_name("runbook-controlplane-ca")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_usage(ca=True), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    def issue(stem: str, common: str, *, organization: str | None = None, server: bool = False,
              names: tuple[str, ...] = ()) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(common, organization)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(_usage(ca=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if server:
            alt = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        pair = Pair(directory / f"{stem}.crt", directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_private, sa_public = directory / "service-account.key", directory / "service-account.pub"
    _write_key(sa_private, sa_key)
    sa_public.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return Pki(
        ca=ca_path,
        apiserver=issue("apiserver", "kube-apiserver", server=True,
                        names=("127.0.0.1", "localhost", SERVICE_IP, "kubernetes", "kubernetes.default",
                               "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")),
        kubelet_serving=issue("kubelet-serving", "kwok-kubelet", server=True, names=("127.0.0.1", "localhost")),
        kubelet_client=issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                             organization="system:masters"),
        admin=issue("admin", "runbook-test-admin", organization="system:masters"),
        controller_manager=issue("controller-manager", "system:kube-controller-manager"),
        scheduler=issue("scheduler", "system:kube-scheduler"),
        kwok=issue("kwok", "kwok-controller", organization="system:masters"),
        service_account_key=sa_private, service_account_public=sa_public)
