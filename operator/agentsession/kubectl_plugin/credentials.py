"""Who the plugin is to the cluster and to the gateway: the user's kubeconfig, the session a command names, the
token it presents (never the kubeconfig's own unless asked), and over what transport a token may go."""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from agentsession.kubectl_plugin.errors import NoKubeconfig, PluginError
from agentsession.kubectl_plugin.names import GATEWAY_AUDIENCE

TOKEN_SECONDS = 3600  # the tokens this plugin requests; the gateway closes the connection when they expire
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class Cluster:
    """The user's kubeconfig and context; its client is made on first use, so --gateway with --token needs none."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._api: Any = None

    def api(self) -> Any:
        if self._api is None:
            from kubernetes import config

            try:
                self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=self.kubeconfig, context=self.context
                )
            except Exception as exc:  # the client raises ConfigException, OSError, YAML errors, ...
                where = self.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                raise NoKubeconfig(f"cannot load the kubeconfig {where}: {exc}") from exc
        return self._api

    def namespace(self) -> str:
        """The namespace of the context, as kubectl takes it when -n is not given."""
        from kubernetes import config

        try:
            contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=self.kubeconfig
            )
        except Exception:  # no kubeconfig at all: kubectl's default
            return "default"
        chosen = next((c for c in contexts if c["name"] == self.context), None) if self.context else active
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")

    def bearer_token(self) -> str | None:
        """The kubeconfig user's bearer token (a static token, or one an exec or auth provider gave)."""
        value = self.api().configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if not value:
            return None
        scheme, _, token = str(value).partition(" ")
        return token if scheme.lower() == "bearer" else str(value)

    def username(self) -> str:
        """Who the API server takes the kubeconfig's user for (SelfSubjectReview, as `kubectl auth whoami`)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            review = client.AuthenticationV1Api(self.api()).create_self_subject_review(
                client.V1SelfSubjectReview()
            )
        except ApiException as exc:
            raise PluginError(
                f"cannot ask the API server who your kubeconfig's user is ({exc.status} {exc.reason}); "
                "give --service-account NAME or --token"
            ) from exc
        user = review.status.user_info if review.status else None
        return str(user.username) if user and user.username else ""

    def request_token(
        self, service_account: str, namespace: str, audience: str, seconds: int = TOKEN_SECONDS
    ) -> str:
        """A token for `[NAMESPACE/]NAME` and `audience` through the TokenRequest API (`kubectl create token`)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        account_ns, _, name = service_account.rpartition("/")
        account_ns = account_ns or namespace
        try:
            result = client.CoreV1Api(self.api()).create_namespaced_service_account_token(
                name,
                account_ns,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(audiences=[audience], expiration_seconds=seconds)
                ),
            )
        except ApiException as exc:
            raise PluginError(
                f"cannot get a token for ServiceAccount {account_ns}/{name}: {exc.status} {exc.reason} "
                f"(you need 'create' on serviceaccounts/token in {account_ns}, and the account must exist)"
            ) from exc
        if result.status is None:
            raise PluginError(f"the API server gave no token for ServiceAccount {account_ns}/{name}")
        return str(result.status.token)

    def kubectl_args(self) -> list[str]:
        args = []
        if self.kubeconfig:
            args += ["--kubeconfig", self.kubeconfig]
        if self.context:
            args += ["--context", self.context]
        return args


@dataclass(frozen=True)
class Target:
    """Which session, and how to reach and authenticate to its gateway."""

    cluster: Cluster
    namespace: str
    name: str
    gateway: str | None
    gateway_service: str | None
    token: str | None
    service_account: str | None
    token_audience: str = GATEWAY_AUDIENCE
    send_kubeconfig_token: bool = False
    insecure: bool = False

    @property
    def agent_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def resolve_token(self) -> str | None:
        """The token to present: given, or one for the gateway's audience only, never the kubeconfig's own
        unless asked (`--send-kubeconfig-token`): that one opens the whole Kubernetes API to whoever gets it."""
        if self.token:
            return self.token
        if self.service_account:
            return self.cluster.request_token(self.service_account, self.namespace, self.token_audience)
        try:
            if self.send_kubeconfig_token:
                token = self.cluster.bearer_token()
                if token is None:
                    raise PluginError("--send-kubeconfig-token: your kubeconfig's user has no bearer token")
                return token
            username = self.cluster.username()
        except NoKubeconfig:
            if self.gateway:
                return None  # no kubeconfig at hand: a gateway in dev mode needs no token
            raise
        account_ns, _, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not name:
            raise PluginError(
                f"your kubeconfig's user ({username or 'anonymous'}) is not a ServiceAccount, so this plugin cannot "
                f"get it a token for the gateway alone (audience {self.token_audience}). Give --service-account "
                "[NAMESPACE/]NAME (a ServiceAccount you may create tokens for), or --token TOKEN; "
                "--send-kubeconfig-token sends your kubeconfig's own token instead, which is good for the whole "
                "Kubernetes API: only to a gateway you trust"
            )
        return self.cluster.request_token(f"{account_ns}/{name}", self.namespace, self.token_audience)


def is_loopback(host: str) -> bool:
    name = host.lower().strip("[]")
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_transport(url: str, insecure: bool) -> None:
    """Refuses to send a token over plain ws:// to another machine, where anyone on the way could read it."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "wss" or insecure or (parsed.scheme == "ws" and is_loopback(parsed.hostname or "")):
        return
    raise PluginError(
        f"{url} is not encrypted: your token would cross the network in the clear. Use the gateway's https:// "
        "(wss://) address, leave out --gateway to reach it through a port-forward, or pass --insecure if you "
        "accept that"
    )
