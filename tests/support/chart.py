"""The chart rendered, and some of its objects applied to a real API server, for tests that ask that server what
it makes of them (RBAC answers, admission policies) while acting as the chart's service accounts."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT

CHART = REPO_ROOT / "charts" / "agentsession"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

Manifest = dict[str, Any]


def run_helm(
    helm: str, *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(
            f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}", pytrace=False
        )
    return proc


def render_chart(
    helm: str,
    *values_files: Path | str,
    release: str = "agentsession",
    namespace: str = "agentsession-system",
    set: Iterable[str] = (),
    include_crds: bool = False,
) -> list[Manifest]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for f in values_files:
        args += ["-f", str(f)]
    for s in set:
        args += ["--set", s]
    if include_crds:
        args.append("--include-crds")
    return [doc for doc in yaml.safe_load_all(run_helm(helm, *args).stdout) if doc]


class Cluster:
    """kubectl on the test cluster; `as_` acts as another user (impersonation, as `kubectl --as`)."""

    def __init__(self, kubectl: str, kubeconfig: str) -> None:
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, as_: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        who = [f"--as={as_}"] if as_ else []
        proc = subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *who, *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{proc.stderr or proc.stdout}", pytrace=False)
        return proc

    def can_i(
        self, account: str, verb: str, resource: str, args: tuple[str, ...], namespace: str | None
    ) -> bool:
        where = ["--namespace", namespace] if namespace else []
        proc = self.run("auth", "can-i", verb, resource, *args, *where, f"--as={account}", check=False)
        answer = proc.stdout.strip()
        assert answer in ("yes", "no"), f"kubectl auth can-i gave {answer!r}: {proc.stderr}"
        return answer == "yes"


def accounts(namespace: str, release: str) -> tuple[str, str]:
    """The users the API server sees for the chart's operator and gateway service accounts."""
    prefix = f"system:serviceaccount:{namespace}:{release}-agentsession"
    return f"{prefix}-operator", f"{prefix}-gateway"


@contextmanager
def installed(
    cluster: Cluster, helm: str, namespace: str, kinds: Iterable[str], *sets: str
) -> Iterator[tuple[str, list[Manifest]]]:
    """Applies the chart's objects of these kinds under a release name of its own; deletes them after."""
    release = f"rbac-{uuid.uuid4().hex[:6]}"
    wanted = set(kinds)
    docs = [
        m for m in render_chart(helm, release=release, namespace=namespace, set=sets) if m["kind"] in wanted
    ]
    text = yaml.safe_dump_all(docs)
    cluster.run("apply", "-f", "-", stdin=text)
    try:
        yield release, docs
    finally:
        cluster.run("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=text, check=False)
