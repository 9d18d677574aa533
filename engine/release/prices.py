"""Prices (USD per million tokens) and cost estimates; no figure is ever invented.

A price table is a JSON object: `{"_source": "where and when these prices were read",
"MODEL": {"input": USD per 1M input tokens, "output": USD per 1M output tokens}, ...}`;
optional `"batch_input"` and `"batch_output"` give a provider's batch prices (used for
`--batch-api` runs; without them a batch run is priced at the regular rates, an upper
bound, and says so).
It comes from `--prices FILE`, else `$PQID_TUI_PRICES`, else `prices.json` in the user
config directory. A model missing from the table has "no price", never a zero.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

PRICES_ENV = "PQID_TUI_PRICES"


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Per-model input and output prices, and where they came from."""

    path: str
    source_note: str
    prices: dict[str, tuple[float, float]]
    batch_prices: dict[str, tuple[float, float]]

    def lookup(self, model: str, *, batch: bool = False) -> tuple[float, float] | None:
        table = self.batch_prices if batch else self.prices
        if model in table:
            return table[model]
        return table.get(model.rsplit("/", 1)[-1])


def default_prices_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir("pqid-tui")) / "prices.json"


def load_prices(path: Path | None = None, env: dict[str, str] | None = None) -> PriceTable | None:
    """The price table from the flag, the environment variable or the config dir, if any."""
    env = dict(os.environ) if env is None else env
    explicit = path is not None or bool(env.get(PRICES_ENV))
    candidate = path or (Path(env[PRICES_ENV]) if env.get(PRICES_ENV) else default_prices_path())
    if not candidate.is_file():
        if explicit:
            raise ConfigError(f"price table {candidate}: no such file")
        return None
    try:
        data = json.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"price table {candidate}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"price table {candidate}: expected a JSON object of models")
    note = data.get("_source")
    if not isinstance(note, str) or not note.strip():
        raise ConfigError(
            f'price table {candidate}: needs a "_source" note saying where and '
            "when the prices were read"
        )
    prices: dict[str, tuple[float, float]] = {}
    batch_prices: dict[str, tuple[float, float]] = {}
    for model, entry in data.items():
        if model.startswith("_"):
            continue
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), (int, float))
            and not isinstance(entry.get(k), bool)
            and entry[k] >= 0
            for k in ("input", "output")
        ):
            raise ConfigError(
                f"price table {candidate}: {model!r} needs non-negative numbers "
                '"input" and "output" (USD per million tokens)'
            )
        prices[model] = (float(entry["input"]), float(entry["output"]))
        if "batch_input" in entry or "batch_output" in entry:
            if not all(
                isinstance(entry.get(k), (int, float))
                and not isinstance(entry.get(k), bool)
                and entry[k] >= 0
                for k in ("batch_input", "batch_output")
            ):
                raise ConfigError(
                    f"price table {candidate}: {model!r}: batch_input and "
                    "batch_output must both be non-negative numbers"
                )
            batch_prices[model] = (float(entry["batch_input"]), float(entry["batch_output"]))
    return PriceTable(str(candidate), note.strip(), prices, batch_prices)


def _price(
    table: PriceTable | None, model: str, batch: bool
) -> tuple[tuple[float, float] | None, str | None]:
    """(price, note): batch prices when asked and known, else the regular ones."""
    if table is None:
        return None, None
    if batch:
        found = table.lookup(model, batch=True)
        if found is not None:
            return found, "batch prices"
        regular = table.lookup(model)
        return regular, (
            "no batch prices in the table: regular prices, an upper bound" if regular else None
        )
    return table.lookup(model), None


def estimate_tokens(body_bytes: bytes) -> int:
    """A rough prompt-token count: about four bytes of JSON text per token."""
    return max(1, len(body_bytes) // 4)


def plan_cost(
    table: PriceTable | None,
    model: str,
    prompt_tokens: int,
    requests: int,
    max_output_tokens: int,
    *,
    batch: bool = False,
) -> dict[str, Any]:
    """The cost range of a run before it starts: no output at all up to every max output."""
    out: dict[str, Any] = {
        "estimated_prompt_tokens": prompt_tokens,
        "max_output_tokens_total": requests * max_output_tokens,
        "method": "prompt tokens estimated as request-body bytes / 4",
    }
    price, note = _price(table, model, batch)
    if price is None:
        out.update(
            usd_low=None,
            usd_high=None,
            price="no price" + ("" if table else " table") + f" for {model}",
        )
        return out
    low = prompt_tokens * price[0] / 1e6
    high = low + requests * max_output_tokens * price[1] / 1e6
    out.update(
        usd_low=round(low, 6),
        usd_high=round(high, 6),
        price={
            "input_per_mtok": price[0],
            "output_per_mtok": price[1],
            "source": table.source_note if table else None,
            "note": note,
        },
    )
    return out


def spent(
    table: PriceTable | None, model: str, usage: dict[str, int], *, batch: bool = False
) -> dict[str, Any]:
    """USD spent from reported usage, or "no price"."""
    price, note = _price(table, model, batch)
    if price is None:
        return {"usd": None, "price": "no price" + ("" if table else " table")}
    usd = (
        usage.get("prompt_tokens", 0) * price[0] + usage.get("completion_tokens", 0) * price[1]
    ) / 1e6
    return {
        "usd": round(usd, 6),
        "price": {
            "input_per_mtok": price[0],
            "output_per_mtok": price[1],
            "source": table.source_note if table else None,
            "note": note,
        },
    }
