#!/usr/bin/env python3
"""A small WebSocket client of the gateway, for `make demo`: lists the agents, initializes one, sends it a prompt,
answers its permission request, and prints each readiness / init / update event as it arrives. It speaks the
lifecycle dialect frame by frame to show it; connecting and reading updates is the kubectl plugin's code
(`agentsession.kubectl_plugin`).

    python hack/demo_client.py ws://127.0.0.1:8090/ws agentsession-demo/demo "Write a file, with permission"

Set AGENTSESSION_TOKEN to send a bearer token (a gateway with auth on); the dev-mode gateway needs none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import aiohttp

from agentsession.kubectl_plugin.client import ws_connect
from agentsession.kubectl_plugin.conversation import choose_option
from agentsession.kubectl_plugin.errors import PluginError
from agentsession.kubectl_plugin.render import describe_update

SUBPROTOCOL = "agent-lifecycle.v1"
DONE = {"ready", "completed"}


class Printer:
    """One line per event; consecutive message chunks are joined so a streamed answer reads as one line."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.chunks: list[str] = []

    def line(self, kind: str, text: str) -> None:
        self.flush()
        print(f"  [{time.monotonic() - self.start:5.1f}s] {kind:<26} {text}", flush=True)

    def chunk(self, text: str) -> None:
        self.chunks.append(text)

    def flush(self) -> None:
        if self.chunks:
            text, self.chunks = "".join(self.chunks).strip().replace("\n", " "), []
            print(
                f"  [{time.monotonic() - self.start:5.1f}s] {'agent_update':<26} agent_message: {text[:160]!r}"
            )


async def run(url: str, agent_id: str, prompt: str, turn_seconds: float) -> int:
    out = Printer()
    async with (
        aiohttp.ClientSession() as http,
        await ws_connect(http, url, os.environ.get("AGENTSESSION_TOKEN"), SUBPROTOCOL) as ws,
    ):
        out.line("connected", f"{url} (subprotocol {ws.protocol})")
        await ws.send_json({"type": "initialize_agent_request", "agentId": agent_id, "requestId": "init-1"})
        prompted = False
        processing_seen = False
        initialized: dict[str, Any] = {}
        history = 0
        deadline = time.monotonic() + turn_seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out.line("timeout", f"no end of the turn within {turn_seconds:.0f}s")
                return 1
            msg = await ws.receive(timeout=remaining)
            if msg.type != aiohttp.WSMsgType.TEXT:
                out.line("closed", f"{msg.type.name} {msg.data or ''}")
                return 1
            frame = json.loads(msg.data)
            kind, payload = frame.get("type"), frame.get("payload") or {}
            if kind == "session_state":
                agents = payload.get("agents", [])
                listing = ", ".join(f"{a['id']}={a['status']}" for a in agents) or "none"
                out.line("session_state", f"{len(agents)} agent(s): {listing}")
            elif kind in ("agent_initialized", "agent_history") and payload.get("requestId") == "init-1":
                # The history comes in pages: the answer's, then agent_history frames until `next` is null.
                initialized = payload if kind == "agent_initialized" else initialized
                history += len(payload.get("updates", []))
                if payload.get("next") is not None:
                    continue
                info = initialized.get("info", {})
                out.line(
                    "agent_initialized",
                    f"{initialized.get('agentId')} status={info.get('status')} "
                    f"acp session={info.get('sessionId')} "
                    f"modes={[m.get('id') for m in info.get('availableModes') or []]} history={history} update(s)",
                )
                if not prompted:
                    prompted = True
                    out.line("-> send_agent_message", repr(prompt))
                    await ws.send_json(
                        {
                            "type": "send_agent_message",
                            "agentId": agent_id,
                            "text": prompt,
                            "requestId": "prompt-1",
                        }
                    )
            elif kind == "agent_status":
                status = payload.get("status")
                error = (payload.get("info") or {}).get("error")
                out.line(
                    "agent_status", f"{payload.get('agentId')} {status}" + (f" ({error})" if error else "")
                )
                if status == "processing":
                    processing_seen = True
                elif prompted and processing_seen and status in DONE:
                    out.flush()
                    return 0
                elif status in ("failed", "killed"):
                    return 1
            elif kind == "agent_update":
                update_kind, text = describe_update(payload.get("notification") or {})
                if update_kind == "agent_message_chunk" and text is not None:
                    out.chunk(text)
                else:
                    out.line("agent_update", update_kind + (f": {text}" if text else ""))
            elif kind == "agent_permission_request":
                options = payload.get("options") or []
                choice = choose_option(options, "allow") or (options[0] if options else None)
                title = (payload.get("toolCall") or {}).get("title", "")
                out.line(
                    "agent_permission_request", f"{title!r}; answering {choice and choice.get('optionId')}"
                )
                answer: dict[str, Any] = {
                    "type": "agent_permission_response",
                    "agentId": agent_id,
                    "permissionId": payload.get("permissionId"),
                }
                answer.update({"optionId": choice["optionId"]} if choice else {"cancelled": True})
                await ws.send_json(answer)
            elif kind == "agent_permission_resolved":
                out.line("agent_permission_resolved", f"{payload.get('outcome')}")
            elif kind == "error":
                out.line("error", f"{payload.get('code')}: {payload.get('message')}")
                return 1
            elif kind == "ack":
                details = {
                    k: v for k, v in payload.items() if k not in ("requestType", "requestId", "agentId")
                }
                out.line("ack", f"{payload.get('requestType')} {json.dumps(details)[:120]}")
            else:
                out.line(str(kind), json.dumps(payload)[:160])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url", help="the gateway's /ws URL")
    parser.add_argument("agent", help="agent id: namespace/name of the AgentSession")
    parser.add_argument("prompt", nargs="?", default="Please write demo.txt (this asks for permission).")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    try:
        return asyncio.run(run(args.url, args.agent, args.prompt, args.timeout))
    except PluginError as exc:
        print(f"  {exc}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError) as exc:
        print(f"  gateway not reachable at {args.url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
