"""ACP update -> WebSocket client latency and update throughput through agentctl.

A real agentctl (subprocess transport) runs the demo agent on loopback. The agent stamps each
`agent_message_chunk` with time.time_ns() when it writes it; a WebSocket client on /api/v1/acp/stream takes the
difference on arrival. Path measured: agent stdout -> agentctl (parse, journal append, fan-out) -> WS frame.

Run: `python -m benchmarks.agentctl_bench [--updates N] [--paced-us U]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from agentsession.contract.auth import INSTANCE_HEADER, authorization

TOKEN = "bench-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def _run_burst(
    http: aiohttp.ClientSession,
    base: str,
    instance: str,
    ws: aiohttp.ClientWebSocketResponse,
    count: int,
    every_us: int,
) -> dict[str, float]:
    cue = f"__burst {count} every {every_us}us__" if every_us else f"__burst {count}__"
    latencies: list[float] = []
    first = last = 0.0
    path = "/api/v1/acp/prompt"
    signed = {"Authorization": authorization(TOKEN, instance, "POST", path)}
    send = asyncio.create_task(http.post(base + path, json={"prompt": cue}, headers=signed))
    while True:
        msg = await asyncio.wait_for(ws.receive(), 60)
        now = time.time_ns()
        frame: dict[str, Any] = json.loads(msg.data)
        if frame["kind"] == "turn_end":
            break
        update = frame["notification"].get("update", {})
        if update.get("sessionUpdate") != "agent_message_chunk":
            continue
        words = update["content"]["text"].split()
        if len(words) == 3 and words[0] == "burst":
            latencies.append((now - int(words[2])) / 1e6)
            last = now / 1e9
            first = first or int(words[2]) / 1e9
    resp = await send
    resp.release()
    return {
        "n": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": _pct(latencies, 99),
        "max_ms": max(latencies),
        "updates_per_s": len(latencies) / max(1e-9, last - first),
    }


async def bench(updates: int, paced_us: int) -> dict[str, dict[str, float]]:
    bin_dir = Path(sys.executable).parent
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "AGENTCTL_TOKEN": TOKEN,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        proc = await asyncio.create_subprocess_exec(
            str(bin_dir / "agentctl"), "--host", "127.0.0.1", "--port", str(port), "--workdir", tmp,
            "--log-level", "WARNING", env=env, stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            async with aiohttp.ClientSession() as http:
                instance = ""
                for _ in range(200):
                    try:
                        async with http.get(f"{base}/health") as r:
                            instance = r.headers.get(INSTANCE_HEADER, "")
                            if r.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)

                def auth(method: str, path: str) -> dict[str, str]:
                    return {"Authorization": authorization(TOKEN, instance, method, path)}

                start, stream = "/api/v1/start", "/api/v1/acp/stream"
                async with http.post(base + start, json={}, headers=auth("POST", start)) as r:
                    assert r.status == 200, await r.text()
                async with http.ws_connect(base + stream, headers=auth("GET", stream)) as ws:
                    await _run_burst(http, base, instance, ws, 200, 0)  # warm-up
                    return {
                        "burst": await _run_burst(http, base, instance, ws, updates, 0),
                        f"paced_{paced_us}us": await _run_burst(
                            http, base, instance, ws, max(200, updates // 5), paced_us
                        ),
                    }
        finally:
            proc.terminate()
            await proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agentctl_bench")
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--paced-us", type=int, default=1000, help="gap between updates in the paced run")
    args = parser.parse_args(argv)
    results = asyncio.run(bench(args.updates, args.paced_us))
    print(f"agentctl ACP update -> WS client, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for name, r in results.items():
        print(
            f"  {name:>14}: n={int(r['n'])} p50={r['p50_ms']:.2f} ms p99={r['p99_ms']:.2f} ms "
            f"max={r['max_ms']:.2f} ms throughput={r['updates_per_s']:.0f} updates/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
