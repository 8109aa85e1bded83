"""What a session may reach and spend, as the API says it, and the pure rules both the operator and the egress
proxy apply to it: which hosts are allowed, which budget holds, whether it is spent, and how a phantom credential
names its pod.

The proxy enforces (it refuses the call); the operator reports (condition `BudgetExhausted`, an Event). Both read
the same three layers, most specific first: the session's spec, its namespace's annotations, the chart's defaults.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agentsession.api.constants import GROUP

# An exact host name, or `*.` and a domain (any name under it, not the domain itself). Lower case, no port.
HOST_PATTERN: Final = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HostPattern = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=HOST_PATTERN)]
# A decimal amount of US dollars, as a string so no float rounding creeps into budgets and totals.
USD_PATTERN: Final = r"^[0-9]{1,9}(\.[0-9]{1,6})?$"
Usd = Annotated[str, StringConstraints(max_length=20, pattern=USD_PATTERN)]

# Namespace annotations: the namespace's defaults, below the session's own spec and above the chart's.
EGRESS_ALLOW_ANNOTATION: Final = (
    f"{GROUP}/egress-allow"  # comma-separated host patterns, added to the chart's
)
BUDGET_ANNOTATION: Final = f"{GROUP}/budget"  # JSON of a Budget: {"maxTokens": 100000, "maxCostUSD": "5"}
# On a session pod: the SHA-256 (hex) of the phantom credential its agent holds; the proxy looks pods up by it.
PHANTOM_DIGEST_ANNOTATION: Final = f"{GROUP}/egress-credential-sha256"
PHANTOM_PREFIX: Final = "agsp1_"
BUDGET_CONDITION: Final = "BudgetExhausted"

Provider = Literal["anthropic", "openai", "gemini"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EgressSpec(_Model):
    allow: list[HostPattern] | None = Field(
        default=None,
        max_length=256,
        description="Hosts the session may reach through the egress proxy (HTTP CONNECT or plain HTTP), besides "
        "the namespace's and the chart's: exact names, or '*.' and a domain for any name under it.",
    )


class GitAccess(_Model):
    push: bool = Field(
        default=False,
        description="Let the agent push to the configured git hosts (with the credential the proxy adds); "
        "clone and fetch are always allowed.",
    )


class NetworkSpec(_Model):
    """How the session's pod reaches the outside: only through the release's egress proxy."""

    egress: EgressSpec | None = Field(
        default=None, description="Hosts the agent may reach through the proxy, besides the model endpoint."
    )
    git: GitAccess | None = Field(
        default=None,
        description="What the agent may do on the configured git hosts (clone and fetch always).",
    )


class Budget(_Model):
    """Limits on the model calls of one session; each unset limit falls back to the namespace's, then the
    chart's. Raising one lets an exhausted session go on, without a restart."""

    maxTokens: int | None = Field(
        default=None, ge=0, description="Input plus output tokens, cached input included."
    )
    maxCostUSD: Usd | None = Field(
        default=None, description="Cost in US dollars, from the chart's price table, as a decimal string."
    )
    maxRequests: int | None = Field(default=None, ge=0, description="Model requests.")


class Usage(_Model):
    """Model usage of the session, metered by the egress proxy from the provider's own answers."""

    inputTokens: int = Field(default=0, ge=0)
    outputTokens: int = Field(default=0, ge=0)
    cachedTokens: int = Field(default=0, ge=0, description="Input tokens read from the provider's cache.")
    requests: int = Field(default=0, ge=0)
    costUSD: Usd = Field(default="0")
    updatedTime: datetime | None = None

    @property
    def tokens(self) -> int:
        return self.inputTokens + self.outputTokens + self.cachedTokens


@dataclass(frozen=True)
class ProviderRoute:
    """How one agent type's model traffic goes through the proxy: the variable that holds its (phantom) key, the
    key's name in the session's credentials Secret, and where its vendor answers by default."""

    provider: Provider
    key_env: str
    secret_key: str
    default_upstream: str


PROVIDERS: Final[Mapping[str, ProviderRoute]] = {
    "claude-code": ProviderRoute(
        "anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY", "https://api.anthropic.com"
    ),
    "codex": ProviderRoute("openai", "OPENAI_API_KEY", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    "gemini": ProviderRoute(
        "gemini", "GEMINI_API_KEY", "GEMINI_API_KEY", "https://generativelanguage.googleapis.com"
    ),
}


def matches(host: str, pattern: str) -> bool:
    """`*.example.com` matches names under example.com, never example.com itself; anything else only itself."""
    host = host.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    return any(matches(host, pattern) for pattern in patterns)


def _annotation_hosts(value: str | None) -> list[str]:
    hosts = [part.strip().lower() for part in (value or "").split(",")]
    return [host for host in hosts if host and re.match(HOST_PATTERN, host)]


def effective_allow(
    session: NetworkSpec | None, namespace_annotations: Mapping[str, str], chart: Iterable[str]
) -> tuple[str, ...]:
    """The session's hosts, then the namespace's, then the chart's: a union, since each layer only adds. A bad
    entry in the annotation is skipped (the namespace's owner sees it in the proxy's log), never widened."""
    own = list(session.egress.allow or []) if session and session.egress else []
    merged = [*own, *_annotation_hosts(namespace_annotations.get(EGRESS_ALLOW_ANNOTATION)), *chart]
    return tuple(dict.fromkeys(merged))


def namespace_budget(namespace_annotations: Mapping[str, str]) -> Budget:
    raw = namespace_annotations.get(BUDGET_ANNOTATION)
    if not raw:
        return Budget()
    try:
        return Budget.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return Budget()


def effective_budget(
    session: Budget | None, namespace_annotations: Mapping[str, str], chart: Budget
) -> Budget:
    """Each limit from the most specific layer that sets it."""
    layers = [session or Budget(), namespace_budget(namespace_annotations), chart]
    fields = {}
    for name in Budget.model_fields:
        fields[name] = next(
            (getattr(layer, name) for layer in layers if getattr(layer, name) is not None), None
        )
    return Budget.model_validate(fields)


def exhausted(usage: Usage | None, budget: Budget) -> str | None:
    """Why the budget is spent (a sentence naming the limit), or None while calls may go on."""
    usage = usage or Usage()
    if budget.maxRequests is not None and usage.requests >= budget.maxRequests:
        return f"{usage.requests} model requests reached the budget of {budget.maxRequests}"
    if budget.maxTokens is not None and usage.tokens >= budget.maxTokens:
        return f"{usage.tokens} tokens reached the budget of {budget.maxTokens}"
    if budget.maxCostUSD is not None and usd(usage.costUSD) >= usd(budget.maxCostUSD):
        return f"a cost of ${usage.costUSD} reached the budget of ${budget.maxCostUSD}"
    return None


def usd(value: str) -> Decimal:
    try:
        return Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal amount of dollars (e.g. 2.50)") from None


def usd_text(value: Decimal) -> str:
    """At most six decimals, no exponent, no trailing zeros: what `Usd` accepts."""
    text = format(value.quantize(Decimal("0.000001")), "f").rstrip("0").rstrip(".")
    return text or "0"


def new_phantom() -> str:
    """A credential that stands for the real key in the agent's environment: worthless anywhere but through the
    egress proxy, from the pod it was made for, while that pod lives."""
    return PHANTOM_PREFIX + secrets.token_urlsafe(32)


def phantom_digest(phantom: str) -> str:
    return hashlib.sha256(phantom.encode()).hexdigest()
