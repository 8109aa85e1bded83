"""kubectl agentsession: drive AgentSessions from a terminal, through the AgentSession gateway.

    kubectl agentsession attach NAME          live updates; a line you type is a prompt; permissions asked inline
    kubectl agentsession prompt NAME TEXT     one turn, printed; the exit status says how the turn ended
    kubectl agentsession history NAME         everything the session said and did
    kubectl agentsession shell NAME           a terminal in the session's workspace
    kubectl agentsession suspend NAME         set spec.suspend (with your kubeconfig); `resume` unsets it
    kubectl agentsession get [NAME]           sessions with their phase, model requests, tokens and cost
    kubectl agentsession status NAME          one session: conditions, usage and budget (`describe` too)

Where the gateway is: --gateway URL, else the chart's gateway Service that serves the session's namespace, reached
through `kubectl port-forward` on a free loopback port for as long as the command runs.

Who you are to the gateway: --token (or $AGENTSESSION_TOKEN); else a token for the gateway's audience
(`agentsession-gateway`, --token-audience) requested with TokenRequest for --service-account, or for your
kubeconfig's user when it is a ServiceAccount. Your kubeconfig's own token, good for the whole Kubernetes API, is
sent only with --send-kubeconfig-token. A gateway reached over plain ws:// must be on this machine (loopback),
unless you pass --insecure.

Exit status of `prompt`: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 6 cancelled, 7 error (the
turn failed), 8 another stop reason. Every command: 1 when it could not do what was asked (the message says why),
2 for a usage error, 130 when interrupted.

This file needs only Python 3.11+, aiohttp and the kubernetes client (the project's dependencies): installed with
the project it is the `kubectl-agentsession` command; copied alone onto the PATH under that name and made
executable, it works the same.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from agentsession.kubectl_plugin import api_commands, gateway_commands
from agentsession.kubectl_plugin.credentials import Cluster, Target
from agentsession.kubectl_plugin.errors import EXIT_FAILED, EXIT_INTERRUPTED, PluginError
from agentsession.kubectl_plugin.names import GATEWAY_AUDIENCE


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="the session's namespace (default: the context's)")
    common.add_argument("--context", help="the kubeconfig context to use")
    common.add_argument(
        "--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    reach = argparse.ArgumentParser(add_help=False, parents=[common])
    reach.add_argument(
        "--gateway", default=os.environ.get("AGENTSESSION_GATEWAY"),
        help="the gateway's URL (ws://HOST:PORT/ws or http://HOST:PORT); default: port-forward to its Service",
    )  # fmt: skip
    reach.add_argument(
        "--gateway-service", help="NAMESPACE/NAME of the gateway's Service, when several exist"
    )
    reach.add_argument(
        "--token", default=os.environ.get("AGENTSESSION_TOKEN"), help="a bearer token to present"
    )
    reach.add_argument(
        "--service-account",
        help="[NAMESPACE/]NAME: present a token requested for this ServiceAccount and the gateway's audience",
    )
    reach.add_argument(
        "--token-audience", default=os.environ.get("AGENTSESSION_TOKEN_AUDIENCE", GATEWAY_AUDIENCE),
        help=f"the audience of the tokens requested for the gateway (default {GATEWAY_AUDIENCE})",
    )  # fmt: skip
    reach.add_argument(
        "--send-kubeconfig-token", action="store_true",
        help="present your kubeconfig's own bearer token (good for the whole Kubernetes API)",
    )  # fmt: skip
    reach.add_argument(
        "--insecure", action="store_true", help="allow a ws:// (unencrypted) --gateway on another machine"
    )

    top = argparse.ArgumentParser(
        prog="kubectl agentsession", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    attach = sub.add_parser("attach", parents=[reach], help="follow a session live and talk to it")
    attach.add_argument("name")
    attach.add_argument("--no-history", action="store_true", help="show only what happens from now on")
    prompt = sub.add_parser("prompt", parents=[reach], help="send one prompt; exit with its stop reason")
    prompt.add_argument("name")
    prompt.add_argument("text")
    prompt.add_argument(
        "--permissions", choices=("ask", "allow", "reject", "cancel"), default="ask",
        help="how permission requests of the turn are answered (ask: a line read from stdin)",
    )  # fmt: skip
    history = sub.add_parser(
        "history", parents=[reach], help="print the session's history (starts it if suspended)"
    )
    history.add_argument("name")
    history.add_argument("-o", "--output", choices=("text", "json"), default="text")
    shell = sub.add_parser("shell", parents=[reach], help="a terminal in the session's workspace")
    shell.add_argument("name")
    for verb in ("suspend", "resume"):
        cmd = sub.add_parser(verb, parents=[common], help=f"{verb} the session (spec.suspend)")
        cmd.add_argument("name")
        cmd.add_argument(
            "--wait",
            action="store_true",
            help=f"until the session is {'Suspended' if verb == 'suspend' else 'Ready'}",
        )
        cmd.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits (default 120)")
    get = sub.add_parser(
        "get", parents=[common], help="list sessions with their usage (requests, tokens, cost)"
    )
    get.add_argument("name", nargs="?")
    status = sub.add_parser(
        "status", aliases=["describe"], parents=[common], help="a session's conditions, usage and budget"
    )
    status.add_argument("name")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return top


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    cluster = Cluster(args.kubeconfig, args.context)
    target = Target(
        cluster,
        args.namespace or cluster.namespace(),
        args.name,
        getattr(args, "gateway", None),
        getattr(args, "gateway_service", None),
        getattr(args, "token", None),
        getattr(args, "service_account", None),
        getattr(args, "token_audience", GATEWAY_AUDIENCE),
        getattr(args, "send_kubeconfig_token", False),
        getattr(args, "insecure", False),
    )
    if args.command == "get":
        return api_commands.run_get(target, args.name)
    if args.command in ("status", "describe"):
        return api_commands.run_status(target, args.output)
    if args.command in ("suspend", "resume"):
        return api_commands.set_suspend(target, args.command == "suspend", args.wait, args.timeout)
    if args.command == "prompt":
        return asyncio.run(gateway_commands.run_prompt(target, args.text, args.permissions))
    if args.command == "attach":
        return asyncio.run(gateway_commands.run_attach(target, not args.no_history))
    if args.command == "history":
        return asyncio.run(gateway_commands.run_history(target, args.output))
    return asyncio.run(gateway_commands.run_shell(target))


def main() -> None:
    try:
        code = run(sys.argv[1:])
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code)
