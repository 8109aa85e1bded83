"""What the pod keeps from its agent: agentctl's state on storage the agent's container does not mount, another user
for agentctl, a /tmp each, the terminal's HOME agentctl's alone; a disk bound on every container and on the scratch
workspace; agentctl's image the operator's; and the workspace layout step, run for real on a directory."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils.quantity import parse_quantity

from agentsession.agentctl.config import parse_config
from agentsession.api.models import RESERVED_MOUNT_PATHS, AgentSessionSpec, PoolTemplate
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pod_builder import (
    AGENTCTL_HOME,
    AGENTCTL_STATE_DIR,
    SpecError,
    build_pod,
)
from agentsession.controller.pool_builder import PoolRef, build_member
from tests.support.pod_security import restricted_violations

SESSION = SessionRef(namespace="team-a", name="fix-bug", uid="1234-uid")
CONFIG = OperatorConfig(image="agentsession:test")
PERSISTENT = {"workspace": {"size": "1Gi", "repository": {"url": "https://example.com/r.git"}}}
SPECS = {
    "scratch": {},
    "persistent with a clone": PERSISTENT,
    "custom agent, CA bundle": {
        "agent": {"type": "custom", "image": "x/y:1", "command": ["run"], "caBundle": {"configMapName": "ca"}}
    },
}


def pod_for(spec: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[str, Any]:
    return build_pod(SESSION, AgentSessionSpec.model_validate(spec), config)


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in containers(pod) if c["name"] == name)


def mounts(pod: dict[str, Any], name: str) -> list[tuple[str, str | None, str]]:
    """(volume, subPath, mountPath) of each of the container's mounts."""
    return [(m["name"], m.get("subPath"), m["mountPath"]) for m in container(pod, name)["volumeMounts"]]


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_the_agent_mounts_nothing_of_agentctls_but_the_workspace_and_the_fifo_pair(
    spec: dict[str, Any],
) -> None:
    pod = pod_for(spec)
    agent = mounts(pod, "agent")
    agentctl = mounts(pod, "agentctl")
    # The workspace volume only through the workspace's directory: never its root, never agentctl's directory.
    assert [m for m in agent if m[0] == "workspace"] == [
        ("workspace", ".agentsession/workspace", "/workspace")
    ]
    assert ("workspace", ".agentsession/agentctl", "/var/lib/agentctl") in agentctl
    shared = {(v, sub) for v, sub, _ in agent} & {(v, sub) for v, sub, _ in agentctl}
    assert shared == {("workspace", ".agentsession/workspace"), ("agentctl-fifo", None)}
    # Each its own /tmp.
    assert ("tmp", None, "/tmp") in agent
    assert ("agentctl-tmp", None, "/tmp") in agentctl
    # No other container sees agentctl's directory either.
    for c in containers(pod):
        if c["name"] not in ("agentctl", "layout"):
            assert not [
                m for m in mounts(pod, c["name"]) if m[0] == "workspace" and m[1] != ".agentsession/workspace"
            ]


def test_agentctl_keeps_its_state_and_the_terminals_home_on_its_own_mount(tmp_path: Path) -> None:
    agentctl = container(pod_for({"workspace": {"mountPath": str(tmp_path)}}), "agentctl")
    config = parse_config([*agentctl["args"], "--no-auth"])
    assert config.state_dir == Path(AGENTCTL_STATE_DIR)
    env = {e["name"]: e.get("value") for e in agentctl["env"]}
    assert env["HOME"] == AGENTCTL_HOME
    for path in (AGENTCTL_STATE_DIR, AGENTCTL_HOME):
        assert path.startswith("/var/lib/agentctl/")
    # The terminal writes what the agent may edit.
    assert config.shell_umask == 0o002


def test_agent_and_agentctl_are_other_users_of_one_group() -> None:
    pod = pod_for(PERSISTENT)
    users = {c["name"]: c["securityContext"]["runAsUser"] for c in containers(pod)}
    assert users == {"layout": 65532, "clone": 65532, "agentctl": 65533, "agent": 65532}
    assert {c["securityContext"]["runAsGroup"] for c in containers(pod)} == {65532}
    assert pod["spec"]["securityContext"]["fsGroup"] == 65532
    mine = pod_for(PERSISTENT, CONFIG.model_copy(update={"run_as_user": 1000, "agentctl_run_as_user": 2000}))
    assert {c["name"]: c["securityContext"]["runAsUser"] for c in containers(mine)} == {
        "layout": 1000, "clone": 1000, "agentctl": 2000, "agent": 1000
    }  # fmt: skip
    assert {c["securityContext"]["runAsGroup"] for c in containers(mine)} == {1000}


def test_one_uid_for_both_is_refused() -> None:
    with pytest.raises(ValueError, match="agentctl_run_as_user must differ from run_as_user"):
        OperatorConfig(run_as_user=1000, agentctl_run_as_user=1000)


def test_what_the_agent_and_the_clone_write_is_group_writable() -> None:
    pod = pod_for(PERSISTENT)
    assert container(pod, "agent")["command"][2].startswith("umask 002; ")
    assert container(pod, "clone")["command"][2].startswith("umask 002 && ")


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_every_container_has_disk_requests_and_limits(spec: dict[str, Any]) -> None:
    pod = pod_for(spec)
    for c in containers(pod):
        resources = c["resources"]
        request = parse_quantity(resources["requests"]["ephemeral-storage"])  # type: ignore[no-untyped-call]
        limit = parse_quantity(resources["limits"]["ephemeral-storage"])  # type: ignore[no-untyped-call]
        assert 0 < request <= limit, c["name"]
    assert restricted_violations(pod) == []


def test_a_warm_pools_pods_have_disk_bounds_too() -> None:
    template = PoolTemplate.model_validate({"workspace": {"size": "1Gi"}})
    pod = build_member(PoolRef("team-a", "warm", "pool-uid"), "warm-abcde", template, CONFIG, "t")[-1]
    assert [c["name"] for c in containers(pod)] == ["layout", "agentctl", "agent"]
    for c in containers(pod):
        assert "ephemeral-storage" in c["resources"]["limits"], c["name"]


def test_the_pods_disk_budget_holds_a_full_scratch_workspace() -> None:
    """The kubelet evicts a pod once its emptyDirs and logs pass the sum of its containers' limits: with the
    defaults that sum leaves the emptyDirs' own size limits the first bound to meet."""
    pod = pod_for({})
    total = sum(
        parse_quantity(c["resources"]["limits"]["ephemeral-storage"])  # type: ignore[no-untyped-call]
        for c in containers(pod)
    )
    volumes = sum(
        parse_quantity(v["emptyDir"]["sizeLimit"])  # type: ignore[no-untyped-call]
        for v in pod["spec"]["volumes"]
        if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory"
    )
    assert volumes < total


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # The session's own disk bounds stand.
        (
            {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"ephemeral-storage": "2Gi"}},
            ({"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "2Gi"}),
        ),
        # A request above the default limit raises the limit to it...
        (
            {"requests": {"ephemeral-storage": "20Gi"}, "limits": {"cpu": "1"}},
            ({"ephemeral-storage": "20Gi"}, {"cpu": "1", "ephemeral-storage": "20Gi"}),
        ),
        # ...a limit below the default request brings the request down to it.
        (
            {"requests": {"cpu": "1"}, "limits": {"ephemeral-storage": "100Mi"}},
            ({"cpu": "1", "ephemeral-storage": "100Mi"}, {"ephemeral-storage": "100Mi"}),
        ),
        # Left out of both: the defaults.
        (
            {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
            ({"cpu": "1", "ephemeral-storage": "256Mi"}, {"cpu": "1", "ephemeral-storage": "12Gi"}),
        ),
    ],
)
def test_a_session_sets_its_disk_bounds_and_never_drops_them(
    resources: dict[str, Any], expected: tuple[dict[str, str], dict[str, str]]
) -> None:
    agent = container(pod_for({"agent": {"resources": resources}}), "agent")
    assert (agent["resources"]["requests"], agent["resources"]["limits"]) == expected


def test_an_operator_without_a_disk_default_adds_none() -> None:
    config = OperatorConfig.model_validate(
        {"agent_resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}, "image": "x"}
    )
    agent = container(pod_for({"agent": {"resources": {"limits": {"cpu": "2"}}}}, config), "agent")
    assert agent["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}


@pytest.mark.parametrize("size", ["lots", "0", "-1Gi"])
def test_a_workspace_size_limit_must_be_a_positive_quantity(size: str) -> None:
    with pytest.raises(ValueError, match="workspace_size_limit"):
        OperatorConfig(workspace_size_limit=size)


def test_agentctl_runs_the_operators_image_or_one_it_allows() -> None:
    assert container(pod_for({}), "agentctl")["image"] == "agentsession:test"
    assert (
        container(pod_for({"agentctl": {"image": "agentsession:test"}}), "agentctl")["image"]
        == "agentsession:test"
    )
    allowing = CONFIG.model_copy(update={"agentctl_images": ["registry.example/agentctl:2"]})
    chosen = pod_for({"agentctl": {"image": "registry.example/agentctl:2"}}, allowing)
    assert container(chosen, "agentctl")["image"] == "registry.example/agentctl:2"


@pytest.mark.parametrize("allowed", [[], ["registry.example/agentctl:2"]])
def test_any_other_agentctl_image_is_refused_saying_which_field_and_what_to_do(allowed: list[str]) -> None:
    config = CONFIG.model_copy(update={"agentctl_images": allowed})
    with pytest.raises(SpecError) as refused:
        pod_for({"agentctl": {"image": "evil.example/agentctl:1"}}, config)
    assert str(refused.value) == (
        "spec.agentctl.image 'evil.example/agentctl:1' is not allowed: agentctl runs the operator's image; "
        "remove spec.agentctl.image, or ask the cluster's administrator to allow that image (operator setting "
        "agentctl_images, chart value operator.agentctlImages)"
    )


def test_the_allowed_agentctl_images_are_a_list_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSION_AGENTCTL_IMAGES", '["a/agentctl:1", "b/agentctl:2"]')
    assert OperatorConfig().agentctl_images == ["a/agentctl:1", "b/agentctl:2"]
    assert OperatorConfig.model_fields["agentctl_images"].default_factory() == []  # type: ignore[misc]


def test_every_path_the_pod_mounts_besides_the_workspace_is_reserved() -> None:
    pod = pod_for({"agent": {"caBundle": {"configMapName": "ca"}}, **PERSISTENT})
    for c in containers(pod):
        for volume, _, path in mounts(pod, c["name"]):
            if c["name"] == "layout" or (volume == "workspace" and path == "/workspace"):
                continue
            assert any(path == p or path.startswith(f"{p}/") for p in RESERVED_MOUNT_PATHS[1:]), path


# --- the layout step, run as the container runs it, on a directory in place of the volume


def layout(pod: dict[str, Any], root: Path) -> subprocess.CompletedProcess[str]:
    command = container(pod, "layout")["command"]
    assert command[:2] == ["sh", "-c"]
    assert command[-1] == "/volume"
    assert ("workspace", None, "/volume") in mounts(pod, "layout")
    return subprocess.run([*command[:-1], str(root)], capture_output=True, text=True, timeout=30, check=False)


def tree(root: Path) -> dict[str, str]:
    """Every path under root, relative, with what it is: a file's content, `dir`, or `-> target`."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = path.read_text()
    return found


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    root = tmp_path / "volume"
    root.mkdir()
    return root


def old_layout(root: Path) -> None:
    """What the one uid left: files written with umask 022, a link to a file outside the volume."""
    outside = root.parent / "outside"
    outside.write_text("not the workspace's\n")
    outside.chmod(0o644)
    old = os.umask(0o022)
    try:
        (root / "README.md").write_text("work\n")
        (root / "src").mkdir()
        (root / "src" / "main.py").write_text("code\n")
        (root / ".home").mkdir()
        (root / ".home" / ".profile").write_text("profile\n")
        (root / ".agentctl").mkdir()
        (root / ".agentctl" / "history.jsonl").write_text('{"seq":1}\n')
        (root / ".agentctl" / "history.jsonl.id").write_text("id\n")
        (root / "..odd").write_text("odd\n")
        (root / "link").symlink_to(outside)
        (root / "lost+found").mkdir()
    finally:
        os.umask(old)


def test_a_persistent_workspace_gets_the_layout_step_first_and_a_scratch_one_none() -> None:
    assert [c["name"] for c in pod_for(PERSISTENT)["spec"]["initContainers"]] == [
        "layout",
        "clone",
        "agentctl",
    ]
    assert [c["name"] for c in pod_for({})["spec"]["initContainers"]] == ["agentctl"]
    step = container(pod_for(PERSISTENT), "layout")
    assert step["image"] == CONFIG.image
    assert step["imagePullPolicy"] == CONFIG.image_pull_policy
    assert step["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_layout_before_is_moved_once_the_journal_to_agentctl_everything_group_writable(
    volume: Path,
) -> None:
    old_layout(volume)
    pod = pod_for(PERSISTENT)
    done = layout(pod, volume)
    assert done.returncode == 0, done.stderr
    assert "the volume's files are in .agentsession/workspace" in done.stdout
    assert tree(volume) == {
        ".agentsession": "dir",
        ".agentsession/agentctl": "dir",
        ".agentsession/agentctl/state": "dir",
        ".agentsession/agentctl/state/history.jsonl": '{"seq":1}\n',
        ".agentsession/agentctl/state/history.jsonl.id": "id\n",
        ".agentsession/workspace": "dir",
        ".agentsession/workspace/..odd": "odd\n",
        ".agentsession/workspace/.home": "dir",
        ".agentsession/workspace/.home/.profile": "profile\n",
        ".agentsession/workspace/README.md": "work\n",
        ".agentsession/workspace/link": f"-> {volume.parent / 'outside'}",
        ".agentsession/workspace/src": "dir",
        ".agentsession/workspace/src/main.py": "code\n",
        "lost+found": "dir",
    }
    for path in (volume / ".agentsession").rglob("*"):
        if not path.is_symlink():
            assert path.stat().st_mode & stat.S_IWGRP, path
    assert stat.S_IMODE((volume.parent / "outside").stat().st_mode) == 0o644  # the link was not followed

    # Once: a second start finds the layout and moves nothing.
    (volume / ".agentsession" / "workspace" / "new.txt").write_text("new\n")
    before = tree(volume)
    again = layout(pod, volume)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert tree(volume) == before


def test_a_new_volume_gets_both_directories_and_nothing_else(volume: Path) -> None:
    done = layout(pod_for(PERSISTENT), volume)
    assert done.returncode == 0, done.stderr
    assert tree(volume) == {
        ".agentsession": "dir",
        ".agentsession/agentctl": "dir",
        ".agentsession/workspace": "dir",
    }


def test_a_move_cut_short_is_finished_at_the_next_start(volume: Path) -> None:
    old_layout(volume)
    moving = volume / ".agentsession" / "moving"
    moving.mkdir(parents=True)
    (volume / "src").rename(moving / "src")
    (volume / ".agentsession" / "agentctl").mkdir()
    (volume / ".agentctl").rename(volume / ".agentsession" / "agentctl" / "state")
    done = layout(pod_for(PERSISTENT), volume)
    assert done.returncode == 0, done.stderr
    found = tree(volume)
    assert found[".agentsession/workspace/src/main.py"] == "code\n"
    assert found[".agentsession/workspace/README.md"] == "work\n"
    assert found[".agentsession/agentctl/state/history.jsonl"] == '{"seq":1}\n'
    assert ".agentsession/moving" not in found
    assert sorted(p.name for p in volume.iterdir()) == [".agentsession", "lost+found"]
