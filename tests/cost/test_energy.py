"""cost.energy: joules and dollars per token by hand."""

import pytest

from hwopt.cost import energy


def test_energy_and_dollars_by_hand():
    assert energy.joules_per_token(700.0, 1400.0) == pytest.approx(0.5)
    # 8 chips at $2/hour: $16/hour = 3600 s; 1e6 tokens at 1000 tokens/s take 1000 s -> $4.44
    assert energy.usd_per_million_tokens(2.0, 1000.0, chips=8) == pytest.approx(16 * 1000 / 3600)
    # 0.5 J/token x 1e6 = 5e5 J = 0.139 kWh at $0.20
    assert energy.electricity_usd_per_million_tokens(0.5, 0.20) == pytest.approx(5e5 / 3.6e6 * 0.2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: energy.joules_per_token(0, 1), "power_w"),
    (lambda: energy.joules_per_token(1, float("inf")), "tokens_per_s"),
    (lambda: energy.usd_per_million_tokens(-1, 1), "price_per_hour_usd"),
    (lambda: energy.usd_per_million_tokens(1, 1, chips=0), "chips"),
    (lambda: energy.electricity_usd_per_million_tokens(1, "cheap"), "usd_per_kwh"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_token_costs_say_what_is_missing_instead_of_guessing():
    text = energy.token_costs(1000.0, 4, 700.0, 2.0, "a dated price")
    assert "4 x 700 W / 1,000 tokens/s = 2.800 J per token" in text
    assert "$2.22 per 1M tokens (a dated price)" in text
    bare = energy.token_costs(1000.0, 4, None, None)
    assert "no power figure" in bare and "no price: enter" in bare
    with pytest.raises(ValueError, match="watts_per_chip"):
        energy.token_costs(1000.0, 4, -1.0, None)
