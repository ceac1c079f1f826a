"""Energy and dollars per token (lesson 12): joules from power and tokens/s, dollars from a price per hour.

    J/token = watts / (tokens/s)                     (the power of every chip serving the batch)
    $ per 1M tokens = chips * USD per chip-hour / 3600 / (tokens/s) * 1e6
    electricity $ per 1M tokens = J/token * 1e6 / 3.6e6 * USD per kWh
The datasheet's TDP (tdp_w in the chip table) is a ceiling on the power and the roofline's tokens/s a ceiling
on the rate, so J/token from the two is no bound either way: a chip may draw less than its TDP, and it reaches
fewer tokens/s than its roofline. Measure both where the machine lets you (hwopt.machine.power).
"""

from __future__ import annotations

from hwopt import arguments

__all__ = ["joules_per_token", "usd_per_million_tokens", "electricity_usd_per_million_tokens", "token_costs"]

JOULES_PER_KWH = 3.6e6


def joules_per_token(power_w: float, tokens_per_s: float) -> float:
    """Energy per token (J): power_w (all chips together) / tokens_per_s."""
    return arguments.positive("power_w", power_w) / arguments.positive("tokens_per_s", tokens_per_s)


def usd_per_million_tokens(price_per_hour_usd: float, tokens_per_s: float, chips: int = 1) -> float:
    """Dollars for 1,000,000 tokens on `chips` chips rented at price_per_hour_usd each."""
    price = arguments.positive("price_per_hour_usd", price_per_hour_usd)
    rate = arguments.positive("tokens_per_s", tokens_per_s)
    chips = arguments.count("chips", chips, "threads")
    return chips * price / 3600.0 / rate * 1e6


def electricity_usd_per_million_tokens(joules_per_token: float, usd_per_kwh: float) -> float:
    """The electricity bill of 1,000,000 tokens at joules_per_token and a price per kWh."""
    joules = arguments.positive("joules_per_token", joules_per_token)
    return joules * 1e6 / JOULES_PER_KWH * arguments.positive("usd_per_kwh", usd_per_kwh)


def token_costs(tokens_per_s: float, chips: int, watts_per_chip: float | None,
                price_per_hour_usd: float | None, price_note: str = "") -> str:
    """Two lines for a deployment of `chips` chips making tokens_per_s: joules per token at watts_per_chip
    (a TDP, or a measured power), and dollars per 1M tokens at price_per_hour_usd per chip (price_note says
    where the price comes from); a missing figure is said, not guessed."""
    rate = arguments.positive("tokens_per_s", tokens_per_s)
    chips = arguments.count("chips", chips, "threads")
    arguments.text("price_note", price_note, allow_empty=True)
    if watts_per_chip is None:
        watts = "no power figure (the chip table lists no TDP for this chip): no J/token"
    else:
        w = arguments.positive("watts_per_chip", watts_per_chip)
        watts = (f"{chips} x {w:g} W / {rate:,.0f} tokens/s = {joules_per_token(chips * w, rate):.3f} J per "
                 "token")
    if price_per_hour_usd is None:
        price = "no price: enter the price per chip-hour you pay (with its date) to get $ per 1M tokens"
    else:
        usd = arguments.positive("price_per_hour_usd", price_per_hour_usd)
        price = (f"{chips} x ${usd:g}/hour / {rate:,.0f} tokens/s = "
                 f"${usd_per_million_tokens(usd, rate, chips):,.2f} per 1M tokens"
                 + (f" ({price_note})" if price_note else ""))
    return f"{watts}\n{price}"
