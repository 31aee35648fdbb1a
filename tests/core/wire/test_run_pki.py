"""A user's own certificates: checked before a run starts, then serving the agent like a run's own CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from core.errors import ConfigError
from core.spark.offload_session import OffloadConfig
from core.wire.protocol import CA_FILE
from core.wire.run_pki import CA_KEY_FILE, CERT_FILE, KEY_FILE, own_server_pki


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(subject: str, key, issuer: x509.Name, signer, sans=(), ca=False) -> x509.Certificate:  # type: ignore[no-untyped-def]
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        names = []
        for s in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(s)))
            except ValueError:
                names.append(x509.DNSName(s))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def own_pki(directory: Path, sans: tuple[str, ...], *, with_ca_key: bool = True) -> Path:
    """An RSA CA of the user's (not the run's EC one) and a server certificate it signed for `sans`."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = _cert(
        "corp CA", ca_key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corp CA")]), ca_key, ca=True
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _cert("agent", key, ca.subject, ca_key, sans)
    directory.mkdir(parents=True)
    (directory / CA_FILE).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / CERT_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / KEY_FILE).write_bytes(_pem(key))
    if with_ca_key:
        (directory / CA_KEY_FILE).write_bytes(_pem(ca_key))
    return directory


def test_the_certificate_must_name_the_advertised_address_be_the_cas_and_match_its_key(
    tmp_path: Path,
) -> None:
    mine = own_pki(tmp_path / "mine", ("10.0.3.7", "*.corp.internal"))
    assert own_server_pki(mine, "10.0.3.7").cert_pem == (mine / CERT_FILE).read_bytes()
    assert own_server_pki(mine, "agent.corp.internal").client_cert_pem is None
    with pytest.raises(ConfigError, match=r"does not name 10\.0\.3\.8"):
        own_server_pki(mine, "10.0.3.8")
    other = own_pki(tmp_path / "other", ("10.0.3.7",))
    (tmp_path / "mixed").mkdir()
    for name, source in ((CA_FILE, other), (CERT_FILE, mine), (KEY_FILE, mine)):
        (tmp_path / "mixed" / name).write_bytes((source / name).read_bytes())
    with pytest.raises(ConfigError, match="is not signed by"):
        own_server_pki(tmp_path / "mixed", "10.0.3.7")
    (tmp_path / "mixed" / KEY_FILE).write_bytes((other / KEY_FILE).read_bytes())
    with pytest.raises(ConfigError, match="is not the key of"):
        own_server_pki(tmp_path / "mixed", "10.0.3.7")
    bare = own_pki(tmp_path / "bare", ("10.0.3.7",), with_ca_key=False)
    with pytest.raises(ConfigError, match=r"has no ca\.key"):
        own_server_pki(bare, "10.0.3.7", mutual=True)
    with pytest.raises(ConfigError, match=r"has no ca\.pem, server\.pem, server\.key"):
        own_server_pki(tmp_path / "nowhere", "10.0.3.7")


def test_a_run_checks_its_own_certificates_before_it_starts(tmp_path: Path) -> None:
    mine = own_pki(tmp_path / "mine", ("10.0.3.7",))
    config = OffloadConfig(share=0.5, advertise="10.0.3.7", transport="mtls", tls_dir=str(mine))
    assert config.own_tls().client_cert_pem is not None  # the VM's callers' certificate, from ca.key
    with pytest.raises(ConfigError, match=r"does not name 10\.0\.3\.9"):
        OffloadConfig(share=0.5, advertise="10.0.3.9", transport="tls", tls_dir=mine)
    with pytest.raises(ConfigError, match="needs TLS"):
        OffloadConfig(share=0.5, advertise="10.0.3.7", transport="plaintext", tls_dir=mine)
