"""The development CA: HTTPS webhooks to this machine, for local development, with nothing to set up.

`payorch serve` with `webhooks.allow_loopback = true` trusts one more CA for its webhooks: a CA made
once under `server.state_dir` (`development-ca/ca.pem`, its key beside it, readable by the owner
only), whose certificate carries name constraints: it can vouch for `localhost`, 127.0.0.0/8 and
`::1` only, so whoever gets hold of its key still cannot impersonate any other host to payorch.
`payorch dev-receiver` serves HTTPS with a certificate it issues for those names
(`dev-receiver/localhost.pem`), so payorch verifies the receiver as it verifies any other: whichever
of the two starts first makes the CA, and the other uses it.

The certificates use ECDSA P-256 keys and carry the extensions that strict verification (OpenSSL's
X509_STRICT, the default of Python 3.13) requires: key identifiers, critical basic constraints.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DIRECTORY = "development-ca"
RECEIVER_DIRECTORY = "dev-receiver"
LOOPBACK_DNS_NAME = "localhost"
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
# What the receiver's certificate names: the host names a developer registers.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
CA_VALIDITY = datetime.timedelta(days=3650)
SERVER_VALIDITY = datetime.timedelta(days=90)
# A server certificate this close to its end is issued anew when the receiver starts.
RENEW_BEFORE = datetime.timedelta(days=7)
# Issued a little in the past, so that a clock a few minutes behind still accepts it.
BACKDATE = datetime.timedelta(minutes=5)

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class ServerCertificate:
    """A certificate (PEM) and its private key (PEM, owner-readable only), as files for a TLS server."""

    certificate: Path
    key: Path


def development_ca_certificate(state_dir: Path) -> Path:
    """Where the development CA's certificate is (or will be) under `state_dir`."""
    return state_dir / CA_DIRECTORY / "ca.pem"


def ensure_development_ca(state_dir: Path) -> Path:
    """The development CA's certificate, made under `state_dir` unless it is there already.

    The CA's directory appears whole or not at all (written aside, then renamed into place), so two
    processes starting at once agree on one CA: the second one's rename fails and it uses the
    first one's."""
    certificate = development_ca_certificate(state_dir)
    if certificate.exists():
        return certificate
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = _new_key()
    now = _now()
    ca = (
        _builder(
            _name("payorch development CA (loopback only)"), _name("payorch development CA (loopback only)")
        )
        .public_key(key.public_key())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_ca_key_usage(), critical=True)
        .add_extension(
            x509.NameConstraints(
                permitted_subtrees=[
                    x509.DNSName(LOOPBACK_DNS_NAME),
                    *(x509.IPAddress(network) for network in LOOPBACK_NETWORKS),
                ],
                excluded_subtrees=None,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    aside = Path(tempfile.mkdtemp(prefix=f".{CA_DIRECTORY}-", dir=state_dir))  # mode 0700
    try:
        _write_private(aside / "ca-key.pem", _key_pem(key))
        (aside / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        try:
            aside.rename(certificate.parent)
        except OSError:
            if not certificate.exists():
                raise  # not another process's CA in place: a real failure
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return certificate


def loopback_server_certificate(state_dir: Path) -> ServerCertificate:
    """A server certificate for `localhost`, `127.0.0.1` and `::1` issued by the development CA (made
    first if missing), kept under `state_dir/dev-receiver/`: the one there when it was issued by
    the current CA and is valid for more than `RENEW_BEFORE`, else a new one."""
    ca_certificate = ensure_development_ca(state_dir)
    directory = state_dir / RECEIVER_DIRECTORY
    kept = ServerCertificate(directory / "localhost.pem", directory / "localhost-key.pem")
    ca = x509.load_pem_x509_certificate(ca_certificate.read_bytes())
    if _still_good(kept, ca):
        return kept
    ca_key = serialization.load_pem_private_key((ca_certificate.parent / "ca-key.pem").read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_certificate.parent / 'ca-key.pem'} is not the development CA's EC key")
    certificate, key = _issue(LOOPBACK_NAMES, issuer=ca, issuer_key=ca_key)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _replace(kept.key, _key_pem(key), private=True)
    _replace(kept.certificate, certificate.public_bytes(serialization.Encoding.PEM), private=False)
    return kept


def _issue(
    names: tuple[str, ...], *, issuer: x509.Certificate, issuer_key: Key
) -> tuple[x509.Certificate, Key]:
    key = _new_key()
    now = _now()
    subject = _name(names[0])
    certificate = (
        _builder(subject, issuer.subject)
        .public_key(key.public_key())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + SERVER_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_general_name(name) for name in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
        .sign(issuer_key, hashes.SHA256())
    )
    return certificate, key


def _still_good(kept: ServerCertificate, ca: x509.Certificate) -> bool:
    if not (kept.certificate.exists() and kept.key.exists()):
        return False
    try:
        certificate = x509.load_pem_x509_certificate(kept.certificate.read_bytes())
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return certificate.not_valid_after_utc - RENEW_BEFORE > _now()


def _builder(subject: x509.Name, issuer: x509.Name) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .serial_number(x509.random_serial_number())
    )


def _ca_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _replace(path: Path, data: bytes, *, private: bool) -> None:
    """Write `path` whole or not at all (aside, then renamed over it)."""
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.unlink(missing_ok=True)
    if private:
        _write_private(aside, data)
    else:
        aside.write_bytes(data)
    aside.replace(path)
