"""The development CA: made once under the state directory, its key the owner's only, vouching for
loopback names only; the receiver's certificate issued from it and kept until it nears its end."""

from __future__ import annotations

import datetime
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from payorch import development_ca
from payorch.development_ca import (
    development_ca_certificate,
    ensure_development_ca,
    loopback_server_certificate,
)


def test_the_ca_is_made_once_and_kept(tmp_path: Path) -> None:
    first = ensure_development_ca(tmp_path)
    made = first.read_bytes()
    assert ensure_development_ca(tmp_path) == first == development_ca_certificate(tmp_path)
    assert first.read_bytes() == made


def test_the_ca_key_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    certificate = ensure_development_ca(tmp_path)
    assert stat.S_IMODE(certificate.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((certificate.parent / "ca-key.pem").stat().st_mode) == 0o600


def test_a_ca_made_meanwhile_by_another_process_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = ensure_development_ca(tmp_path / "theirs")
    made = theirs.read_bytes()
    ours = tmp_path / "ours"
    target = development_ca_certificate(ours)
    original_rename = Path.rename

    def rename_after_the_other(self: Path, destination: Path) -> Path:
        # The other process's rename lands between our check and our own rename.
        original_rename(theirs.parent, target.parent)
        return original_rename(self, destination)

    monkeypatch.setattr(Path, "rename", rename_after_the_other)
    assert ensure_development_ca(ours) == target
    assert target.read_bytes() == made
    assert [path.name for path in ours.iterdir()] == ["development-ca"]  # nothing left aside


def test_the_server_certificate_is_trusted_for_loopback_names_through_the_ca(tmp_path: Path) -> None:
    issued = loopback_server_certificate(tmp_path)
    certificate = x509.load_pem_x509_certificate(issued.certificate.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(address) for address in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    ca = x509.load_pem_x509_certificate(development_ca_certificate(tmp_path).read_bytes())
    certificate.verify_directly_issued_by(ca)
    assert stat.S_IMODE(issued.key.stat().st_mode) == 0o600
    # It is a certificate a TLS server can load with its key.
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(issued.certificate, issued.key)


def test_the_ca_vouches_for_loopback_names_only(tmp_path: Path) -> None:
    ca = x509.load_pem_x509_certificate(ensure_development_ca(tmp_path).read_bytes())
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [
        x509.DNSName("localhost"),
        x509.IPAddress(development_ca.LOOPBACK_NETWORKS[0]),
        x509.IPAddress(development_ca.LOOPBACK_NETWORKS[1]),
    ]


def test_the_server_certificate_is_kept_until_it_nears_its_end(tmp_path: Path) -> None:
    first = loopback_server_certificate(tmp_path)
    kept = first.certificate.read_bytes()
    assert loopback_server_certificate(tmp_path) == first
    assert first.certificate.read_bytes() == kept


def test_a_server_certificate_near_its_end_is_issued_anew(tmp_path: Path) -> None:
    issued = loopback_server_certificate(tmp_path)
    ca_directory = development_ca_certificate(tmp_path).parent
    ca_key = serialization.load_pem_private_key((ca_directory / "ca-key.pem").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    old = x509.load_pem_x509_certificate(issued.certificate.read_bytes())
    ending = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.issuer)
        .public_key(old.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(old.not_valid_before_utc)
        .not_valid_after(ending)
    )
    issued.certificate.write_bytes(
        builder.sign(ca_key, old.signature_hash_algorithm).public_bytes(serialization.Encoding.PEM)
    )
    renewed = loopback_server_certificate(tmp_path)
    assert x509.load_pem_x509_certificate(renewed.certificate.read_bytes()).not_valid_after_utc > ending


def test_a_server_certificate_of_a_replaced_ca_is_issued_anew(tmp_path: Path) -> None:
    issued = loopback_server_certificate(tmp_path)
    before = issued.certificate.read_bytes()
    certificate = development_ca_certificate(tmp_path)
    for path in certificate.parent.iterdir():
        path.unlink()
    certificate.parent.rmdir()
    loopback_server_certificate(tmp_path)
    assert issued.certificate.read_bytes() != before
    ca = x509.load_pem_x509_certificate(certificate.read_bytes())
    x509.load_pem_x509_certificate(issued.certificate.read_bytes()).verify_directly_issued_by(ca)


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str) -> None:
    """A TLS handshake in memory; raises what the client's verification raises."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(to_server, to_client, server_side=True)
    client_side = client.wrap_bio(to_client, to_server, server_hostname=server_hostname)
    for _ in range(10):
        for side in (client_side, server_side):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                continue
        if client_side.version() is not None and server_side.version() is not None:
            return


def test_a_certificate_for_another_host_from_the_ca_is_refused(tmp_path: Path) -> None:
    ca_certificate = ensure_development_ca(tmp_path)
    ca = x509.load_pem_x509_certificate(ca_certificate.read_bytes())
    ca_key = serialization.load_pem_private_key((ca_certificate.parent / "ca-key.pem").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    impostor, key = development_ca._issue(("shop.example",), issuer=ca, issuer_key=ca_key)
    (tmp_path / "impostor.pem").write_bytes(impostor.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "impostor.key").write_bytes(development_ca._key_pem(key))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "impostor.pem", tmp_path / "impostor.key")
    client = ssl.create_default_context(cafile=ca_certificate)
    with pytest.raises(ssl.SSLCertVerificationError, match="permitted subtree violation"):
        handshake(server, client, "shop.example")


def test_the_receivers_certificate_passes_a_strict_verification(tmp_path: Path) -> None:
    issued = loopback_server_certificate(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(issued.certificate, issued.key)
    client = ssl.create_default_context(cafile=development_ca_certificate(tmp_path))
    client.verify_flags |= ssl.VERIFY_X509_STRICT  # Python 3.13's default
    for name in ("localhost", "127.0.0.1"):
        handshake(server, client, name)
