"""A minimal dynamic volume provisioner for the local cluster: directories on this machine as PersistentVolumes.

Kubernetes ships no provisioner that works here (the in-tree hostPath one makes root-only directories under /tmp),
and a workspace PVC that never binds keeps its pod Pending. This loop gives the default StorageClass `standard`
real dynamic provisioning: each pending claim of that class gets a fresh world-writable directory (pods run as
non-root) and a PV pre-bound to it; a Released PV of ours is deleted along with its directory.

Standard library only, so it runs before any virtualenv exists. usage:
  volume_provisioner.py APISERVER_URL CA_FILE CERT_FILE KEY_FILE VOLUMES_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

PROVISIONER = "agentsession.dev/local-dir"
STORAGE_CLASS = "standard"
POLL_SECONDS = 1.0


class Api:
    def __init__(self, server: str, ca: str, cert: str, key: str) -> None:
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
            return json.load(resp)


def ensure_storage_class(api: Api) -> None:
    try:
        api.call("GET", f"/apis/storage.k8s.io/v1/storageclasses/{STORAGE_CLASS}")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        api.call(
            "POST",
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            },
        )


def provision(api: Api, volumes: str, pvc: dict[str, Any]) -> None:
    meta, spec = pvc["metadata"], pvc["spec"]
    name = f"pvc-{meta['uid']}"
    path = os.path.join(volumes, name)
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o1777)  # sticky + world-writable: any pod user may write, as on a fresh disk
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec.get("resources", {}).get("requests", {}).get("storage", "1Gi")},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "hostPath": {"path": path, "type": "Directory"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    try:
        api.call("POST", "/api/v1/persistentvolumes", pv)
        print(f"provisioned {name} for {meta['namespace']}/{meta['name']}", flush=True)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already created on an earlier pass
            raise


def reclaim(api: Api, volumes: str, pv: dict[str, Any]) -> None:
    name = pv["metadata"]["name"]
    path = pv["spec"].get("hostPath", {}).get("path", "")
    if os.path.dirname(path) == volumes:
        shutil.rmtree(path, ignore_errors=True)
    try:
        api.call("DELETE", f"/api/v1/persistentvolumes/{name}")
        print(f"deleted {name}", flush=True)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def sync(api: Api, volumes: str) -> None:
    classes = {
        sc["metadata"]["name"]
        for sc in api.call("GET", "/apis/storage.k8s.io/v1/storageclasses")["items"]
        if sc.get("provisioner") == PROVISIONER
    }
    for pvc in api.call("GET", "/api/v1/persistentvolumeclaims")["items"]:
        if (
            pvc["spec"].get("storageClassName") in classes
            and not pvc["spec"].get("volumeName")
            and pvc.get("status", {}).get("phase") == "Pending"
            and not pvc["metadata"].get("deletionTimestamp")
        ):
            provision(api, volumes, pvc)
    for pv in api.call("GET", "/api/v1/persistentvolumes")["items"]:
        ours = pv["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        if ours and pv.get("status", {}).get("phase") in ("Released", "Failed"):
            reclaim(api, volumes, pv)


def main(argv: list[str]) -> None:
    server, ca, cert, key, volumes = argv
    volumes = os.path.abspath(volumes)
    os.makedirs(volumes, exist_ok=True)
    api = Api(server, ca, cert, key)
    class_ready = False
    while True:
        try:
            if not class_ready:
                ensure_storage_class(api)
                class_ready = True
            sync(api, volumes)
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            print(f"sync failed, retrying: {exc!r}", file=sys.stderr, flush=True)
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    main(sys.argv[1:])
