"""The price table: US dollars per million tokens by provider and model pattern, and what a call cost.

The model label of the metrics is the table's pattern that priced the call, or "other": a model name comes from
the provider's answer (or the agent's request), so it is never a label by itself.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentsession.api.egress import Provider, Usd, usd

OTHER: Final = "other"
MILLION: Final = Decimal(1_000_000)
MAX_ENTRIES: Final = 1000


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Provider
    model: str = Field(
        min_length=1, max_length=128, description="A glob over the model's name: claude-sonnet-4*"
    )
    inputPerMTok: Usd
    outputPerMTok: Usd
    cachedPerMTok: Usd = "0"


@dataclass(frozen=True, slots=True)
class Tokens:
    """What one call used, as the provider reported it; `cached` is input read from the cache."""

    input: int = 0
    output: int = 0
    cached: int = 0
    model: str = ""


class PriceTable:
    def __init__(self, prices: Sequence[Price] = ()) -> None:
        self._prices = list(prices)

    @classmethod
    def load(cls, path: Path | None) -> PriceTable:
        if path is None:
            return cls()
        text = path.read_text()
        try:
            raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            prices = TypeAdapter(list[Price]).validate_python(raw or [])
        except (ValueError, yaml.YAMLError, ValidationError) as error:
            raise ValueError(f"{path}: not a list of prices ({str(error).splitlines()[0]})") from None
        if len(prices) > MAX_ENTRIES:
            raise ValueError(f"{path}: {len(prices)} prices, more than the {MAX_ENTRIES} allowed")
        return cls(prices)

    def price(self, provider: str, model: str) -> Price | None:
        """The first entry of the provider whose pattern matches the model: put specific patterns first."""
        name = model.lower()
        return next(
            (
                p
                for p in self._prices
                if p.provider == provider and fnmatch.fnmatchcase(name, p.model.lower())
            ),
            None,
        )

    def label(self, provider: str, model: str) -> str:
        found = self.price(provider, model)
        return found.model if found else OTHER

    def cost(self, provider: str, tokens: Tokens) -> Decimal:
        found = self.price(provider, tokens.model)
        if found is None:
            return Decimal(0)
        total = (
            tokens.input * usd(found.inputPerMTok)
            + tokens.output * usd(found.outputPerMTok)
            + tokens.cached * usd(found.cachedPerMTok)
        )
        return total / MILLION
