"""A certificate authority of a test's own (the `openssl` CLI), for stand-ins of outside hosts served over TLS:
only clients told to trust its CA (the egress proxy's `--upstream-ca-file`) accept their certificates."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import require_tool


@dataclass(frozen=True)
class Leaf:
    cert: Path
    key: Path


class Authority:
    def __init__(self, directory: Path) -> None:
        self._openssl = require_tool("openssl")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert = self.dir / "ca.crt"
        self._key = self.dir / "ca.key"
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", self._key, "-out", self.cert, "-days", "2", "-subj", "/CN=agentsession tests CA",
                  "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip

    def _run(self, *args: str | Path) -> None:
        done = subprocess.run(
            [self._openssl, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"openssl {args[0]} failed: {done.stderr}"

    def issue(self, name: str, *hosts: str) -> Leaf:
        """A server certificate for `hosts` (DNS names or IP addresses), signed by this authority."""
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
        extensions = self.dir / f"{name}.ext"
        extensions.write_text(
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        )
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0]}")  # fmt: skip
        self._run("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self._key, "-CAcreateserial",
                  "-out", cert, "-days", "2", "-extfile", extensions)  # fmt: skip
        return Leaf(cert, key)
