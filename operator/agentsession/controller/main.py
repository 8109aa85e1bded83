"""`agentsession-operator`: runs the kopf operator with `OperatorConfig`'s settings, alone or leader-elected.

With leader election a replica stands by until it holds the Lease (`controller.leader`): it serves `/metrics` and
a `/healthz` of its own, and kopf (every watch, index and handler) starts only once it leads, so a standby never
writes anything. A leader that loses the Lease exits at once, as client-go's users do, and the kubelet restarts
it as a standby. On SIGTERM the leader stops kopf first (the reconciles under way end first) and then releases the Lease,
so a standby takes over within its retry period rather than a whole lease duration.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import kopf
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentsession.contract.auth import require_key
from agentsession.controller import (
    handlers,  # noqa: F401  (importing registers the handlers)
    metrics,
)
from agentsession.controller.config import OperatorConfig
from agentsession.controller.leader import LeaderElector, new_identity
from agentsession.kube.client import connect
from agentsession.settings import load

log = logging.getLogger(__name__)
# What a replica that lost the Lease exits with: any failure restarts the container, this one says why.
LOST_LEADERSHIP_EXIT_CODE = 3
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def main(argv: Sequence[str] | None = None) -> None:
    config = load(OperatorConfig, argv)
    # The release key is read at start (`handlers.start`); a missing or short one stops the operator here.
    require_key(
        config.agentctl_key_file,
        "agentsession-operator",
        "--agentctl-key-file / AGENTSESSION_AGENTCTL_KEY_FILE",
        "write 32 or more random bytes to a file (the gateway must read the same one)",
    )
    if config.leader_election and config.leader_election_namespace is None:
        config = config.model_copy(update={"leader_election_namespace": _own_namespace()})
    kopf.configure(log_format=kopf.LogFormat.JSON if config.log_format == "json" else kopf.LogFormat.FULL)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if config.verbose else config.log_level)
    if root.level > logging.DEBUG:
        # kopf reports every handler success at INFO; the reconciler's own logs and Events say what matters.
        logging.getLogger("kopf.objects").setLevel(max(logging.WARNING, root.level))
    asyncio.run(run(config))


def _own_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        print(
            "agentsession-operator: error: --leader-election-namespace / AGENTSESSION_LEADER_ELECTION_NAMESPACE: "
            "needed outside a pod, where no service account namespace says where the Lease lives",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


async def run(config: OperatorConfig) -> None:
    metrics_server = await _serve(config.metrics_host, config.metrics_port, "/metrics", _metrics)
    try:
        if config.leader_election:
            await _run_elected(config)
        else:
            metrics.LEADER.set(1)
            await _run_kopf(config)
    finally:
        if metrics_server is not None:
            await metrics_server.cleanup()


async def _run_kopf(config: OperatorConfig) -> None:
    liveness = (
        f"http://{config.liveness_host}:{config.liveness_port}/healthz" if config.liveness_port else None
    )
    await kopf.operator(
        # Named namespaces are watched one by one (namespace-scoped RBAC suffices); patterns are served by a
        # cluster-wide watch that the handlers filter (see handlers._served).
        clusterwide=not config.watches_fixed_namespaces,
        namespaces=config.namespaces if config.watches_fixed_namespaces else [],
        # The Lease decides who acts; kopf's own peering is not leader election (see docs/architecture.md).
        standalone=True,
        liveness_endpoint=liveness,
        memo=kopf.Memo(config=config),
        # Importing handlers registered them in kopf's default registry.
        registry=kopf.get_default_registry(),
    )


async def _run_elected(config: OperatorConfig) -> None:
    assert config.leader_election_namespace is not None  # main() defaults it to the pod's namespace
    # A client of its own: renewals never queue behind the reconciler's calls.
    kube = await connect()
    elector = LeaderElector(
        kube,
        config.leader_election_namespace,
        config.leader_election_lease_name,
        new_identity(),
        lease_duration=config.leader_election_lease_duration_seconds,
        renew_deadline=config.leader_election_renew_deadline_seconds,
        retry_period=config.leader_election_retry_period_seconds,
    )
    try:
        if not await _stand_by(config, elector):
            return
        metrics.LEADER.set(1)
        renewal = asyncio.create_task(elector.keep(), name="leader lease renewal")
        renewal.add_done_callback(_exit_when_lost)
        try:
            await _run_kopf(config)
        finally:
            renewal.remove_done_callback(_exit_when_lost)
            renewal.cancel()
            # A renewal in flight ends first, so it cannot race the release.
            await asyncio.gather(renewal, return_exceptions=True)
            metrics.LEADER.set(0)
            # kopf has stopped every handler and reconcile by now: nothing acts once the Lease is free.
            await elector.release()
    finally:
        await kube.close()


async def _stand_by(config: OperatorConfig, elector: LeaderElector) -> bool:
    """Waits for the Lease while serving /healthz; False when the process was told to stop first."""
    metrics.LEADER.set(0)
    log.info("leader election on lease %s as %s", elector.lease, elector.identity)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)

    async def healthz(_: web.Request) -> web.Response:
        # Live while this loop answers; a standby does not depend on the API server being up.
        return web.json_response({"leader": False, "lease": elector.lease, "holder": elector.holder})

    health = await _serve(config.liveness_host, config.liveness_port, "/healthz", healthz)
    try:
        acquiring = asyncio.create_task(elector.acquire(), name="leader lease acquisition")
        stopped = asyncio.create_task(stopping.wait(), name="stop signal")
        await asyncio.wait({acquiring, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (acquiring, stopped):
            task.cancel()
        await asyncio.gather(acquiring, stopped, return_exceptions=True)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if health is not None:
            # kopf serves /healthz on the same port from here on.
            await health.cleanup()
    if stopping.is_set():
        log.info("stopped while standing by")
        await elector.release()
        return False
    return True


def _exit_when_lost(renewal: asyncio.Future[str]) -> None:
    if renewal.cancelled():
        return
    error = renewal.exception()
    reason = f"the renewal failed: {error!r}" if error is not None else renewal.result()
    log.critical(
        "lost the leader lease (%s); exiting at once so that this replica stops acting "
        "and restarts as a standby",
        reason,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    # No graceful stop: a graceful kopf shutdown would keep reconciling while another replica may lead.
    os._exit(LOST_LEADERSHIP_EXIT_CODE)


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _serve(host: str, port: int, path: str, handler: Handler) -> web.AppRunner | None:
    """One GET route on host:port; None when the port is 0 (the endpoint is off)."""
    if port == 0:
        return None
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("serving http://%s:%d%s", host, port, path)
    return runner


if __name__ == "__main__":
    main()
