"""What the security tests share: a CA and certificates made with `cryptography`, and a real
`topiclake broker start` process with Kafka-style listeners and a `[security]` section."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess, free_port


@dataclass(frozen=True)
class Certificates:
    ca: Path
    broker_cert: Path
    broker_key: Path
    client_cert: Path  # CN=client-app, signed by the CA
    client_key: Path
    client_principal: str = "User:CN=client-app"


def make_certificates(directory: Path) -> Certificates:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def write_key(path: Path, k) -> Path:
        path.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
        return path

    def write_cert(path: Path, cert) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def builder(subject: str, issuer, public_key):
        return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(issuer).public_key(public_key).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "topiclake test CA")])
    ca = (builder("topiclake test CA", ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    broker_key = key()
    broker = (builder("localhost", ca_name, broker_key.public_key())
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    client_key = key()
    client = builder("client-app", ca_name, client_key.public_key()).sign(ca_key, hashes.SHA256())
    return Certificates(write_cert(directory / "ca.pem", ca), write_cert(directory / "broker.pem", broker),
                        write_key(directory / "broker.key", broker_key), write_cert(directory / "client.pem", client),
                        write_key(directory / "client.key", client_key))


def security_toml(certs: Certificates, **settings: str) -> str:
    """The `[security]` section every secured test broker shares (TLS with the test CA, client
    certificates requested; PLAIN and both SCRAM mechanisms), then `settings` as TOML values."""
    extra = "".join(f"{key} = {value}\n" for key, value in settings.items())
    return f"""
[security]
ssl_certfile = "{certs.broker_cert}"
ssl_keyfile = "{certs.broker_key}"
ssl_cafile = "{certs.ca}"
ssl_client_auth = "requested"
sasl_enabled_mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
{extra}"""


class SecureBroker(BrokerProcess):
    """A broker with `listeners` (one free port per security protocol) and the given TOML sections."""

    def __init__(self, tmp: Path, protocols: tuple[str, ...], toml: str, *, users: dict[str, str] = (),
                 args: tuple[str, ...] = ()):
        data = tmp / "data"
        data.mkdir(parents=True, exist_ok=True)
        for user, password in dict(users).items():  # the first users, offline, as kafka-storage --add-scram
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                subprocess.run([sys.executable, "-m", "topiclake.cli", "users", "set", user, "--mechanism", mechanism,
                                "--password", password, "--data", str(data)], check=True, capture_output=True,
                               cwd=REPO)
        self.ports = {protocol: free_port() for protocol in protocols}
        config = tmp / "broker.toml"
        config.write_text("[groups]\ninitial_rebalance_delay_ms = 0\nmin_session_timeout_ms = 1000\n" + toml)
        listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items())
        super().__init__(data, self.ports[protocols[0]], config=config, args=("--listeners", listeners, *args),
                         log_path=tmp / "broker.log")

    def start(self, timeout: float = 60.0) -> "SecureBroker":
        # BrokerProcess passes --port; the listeners say where instead.
        import os

        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("TOPICLAKE_ROOT", None)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "broker", "start", "--data",
                                      str(self.data), "--config", str(self.config), *self.args],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        registration = self.data / "cluster" / "brokers" / "0.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log()}")
            if registration.exists() and str(self.proc.pid) in registration.read_text():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start within {timeout}s: {self.log()}")

    def wait_for_groups(self, security=None, timeout: float = 30.0) -> None:
        """Until the group coordinator has loaded __consumer_offsets (a first commit would otherwise
        get COORDINATOR_LOAD_IN_PROGRESS, which some clients do not retry)."""
        from kio.schema.find_coordinator.v3 import request as fc
        from kio.schema.offset_fetch.v7 import request as of

        from topiclake.client.conn import BrokerConnection
        from topiclake.security.client_config import PLAINTEXT

        protocol = next(iter(self.ports))
        deadline = time.monotonic() + timeout
        with BrokerConnection(self.address(protocol), security=security or PLAINTEXT, timeout=10) as client:
            client.request(fc.FindCoordinatorRequest(key="warm-up", key_type=0))
            while client.request(of.OffsetFetchRequest(group_id="warm-up", topics=None, require_stable=False)
                                 ).error_code.value != 0:
                assert time.monotonic() < deadline, "the group coordinator did not load"
                time.sleep(0.1)

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"
