"""Writes a single-layer OCI image archive from a few files, for images that need no base (the pause image).

Without a registry or a Docker engine, `ctr images import` of such an archive is the shortest way to get an image
into containerd; the layer and config are reproducible (fixed mtimes and ownership), so the digest is stable.

usage: oci_image.py OUT.tar IMAGE_NAME ENTRYPOINT SRC:DEST[:MODE] ...
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile

EPOCH = 0


def _tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes, mode: int) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, EPOCH
    return info, data


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main(argv: list[str]) -> None:
    out, image_name, entrypoint, *files = argv
    layer_members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for spec in files:
        src, dest, *mode = spec.split(":")
        with open(src, "rb") as f:
            layer_members.append(_file(dest.lstrip("/"), f.read(), int(mode[0], 8) if mode else 0o644))
    layer = _tar_bytes(layer_members)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [entrypoint], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _digest(layer),
                    "size": len(layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": image_name,
                        "org.opencontainers.image.ref.name": image_name.rsplit(":", 1)[-1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [
        _file("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644),
        _file("index.json", index, 0o644),
    ]
    for blob in (layer, config, manifest):
        members.append(_file("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob, 0o644))
    with open(out, "wb") as f:
        f.write(_tar_bytes(members))


if __name__ == "__main__":
    main(sys.argv[1:])
