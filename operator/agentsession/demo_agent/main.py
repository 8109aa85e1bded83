"""`agentsession-demo-agent`: speaks ACP on stdin/stdout."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import cast

from acp import Agent, run_agent

from agentsession.demo_agent.agent import DemoAgent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentsession-demo-agent", description="Deterministic ACP demo agent."
    )
    parser.add_argument("--tick", type=float, default=0.05, help="delay between chunks in __slow__ turns")
    parser.add_argument(
        "--modes-as-config-option",
        action="store_true",
        help="offer the modes as a session config option (category mode) instead of as modes, as Codex does",
    )
    parser.add_argument(
        "--key-variable",
        help="require ACP authenticate with an API key in this environment variable before any session, "
        "as Codex does",
    )
    parser.add_argument(
        "--replay-after-load",
        action="store_true",
        help="stream a loaded session's history after answering session/load, as gemini-cli does",
    )
    parser.add_argument(
        "--forget-sessions",
        action="store_true",
        help="answer every session/load with an internal error, as gemini-cli sometimes does",
    )
    args = parser.parse_args(argv)
    # stdout carries the protocol; anything human goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        # DemoAgent implements the ACP methods it supports; the SDK answers "method not found" for the rest.
        asyncio.run(
            run_agent(
                cast(
                    Agent,
                    DemoAgent(
                        tick=args.tick,
                        modes_as_config_option=args.modes_as_config_option,
                        key_variable=args.key_variable,
                        replay_after_load=args.replay_after_load,
                        forget_sessions=args.forget_sessions,
                    ),
                )
            )
        )
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
