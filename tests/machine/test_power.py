"""machine.power: RAPL counters read from a powercap tree, wrap-around, and a clear reason when absent."""

import pytest

from hwopt.machine import power


def powercap(tmp_path, zones):
    """A fake /sys/class/powercap: {zone name: (package name, energy_uj, max_energy_range_uj)}."""
    for zone, (name, energy, limit) in zones.items():
        folder = tmp_path / zone
        folder.mkdir()
        (folder / "name").write_text(f"{name}\n")
        (folder / "max_energy_range_uj").write_text(f"{limit}\n")
        if energy is None:
            (folder / "energy_uj").mkdir()  # cannot be read as a number, whoever asks
        else:
            (folder / "energy_uj").write_text(f"{energy}\n")
    return tmp_path


def test_rapl_packages_are_read_and_their_subzones_skipped(tmp_path):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 5_000_000, 262_143_328_850),
                               "intel-rapl:0:0": ("core", 1_000_000, 262_143_328_850),
                               "intel-rapl:1": ("package-1", 7_000_000, 262_143_328_850)})
    meters, reason = power.rapl_meters(root)
    assert [m.name for m in meters] == ["RAPL package-0", "RAPL package-1"] and reason == ""
    assert meters[0].read_j() == pytest.approx(5.0)
    (root / "intel-rapl:0" / "energy_uj").write_text("7500000\n")
    assert meters[0].read_j() == pytest.approx(7.5)


def test_a_counter_that_wraps_is_counted_once_around():
    meter = power.Meter("m", lambda: 0.0, wrap_j=100.0)
    assert meter.joules_between(90.0, 5.0) == pytest.approx(15.0)
    assert meter.joules_between(5.0, 90.0) == pytest.approx(85.0)


def test_measure_reads_every_counter_around_the_function(tmp_path):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 1_000_000, 10_000_000)})
    (meter,), _ = power.rapl_meters(root)
    energy = root / "intel-rapl:0" / "energy_uj"
    reading = power.measure(lambda: energy.write_text("3000000\n"), [meter])
    assert reading.joules == {"RAPL package-0": pytest.approx(2.0)} and reading.total_j == pytest.approx(2.0)
    assert reading.seconds > 0 and reading.watts > 0 and "RAPL package-0 2.00 J" in str(reading)
    assert power.measure(lambda: None, []) is None


def test_absent_or_unreadable_counters_say_why(tmp_path):
    meters, reason = power.rapl_meters(tmp_path / "none")
    assert meters == [] and "no RAPL counters" in reason
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", None, 10)})
    meters, reason = power.rapl_meters(root)
    assert meters == [] and "not readable" in reason and "intel-rapl:0" in reason
    meters, reason = power.nvml_meters("libno-such-nvml.so")
    assert meters == [] and "no NVML" in reason


def test_this_machine_either_has_counters_or_says_why_not():
    found, reason = power.meters(), power.absent_reason()
    assert bool(found) != bool(reason)
    if found:
        reading = power.measure(lambda: sum(range(100_000)))
        assert reading.total_j >= 0 and set(reading.joules) == {m.name for m in found}


@pytest.mark.parametrize(("call", "match"), [
    (lambda: power.rapl_meters(42), "root"),
    (lambda: power.nvml_meters(""), "library"),
    (lambda: power.measure("run"), "fn"),
    (lambda: power.measure(lambda: None, "meters"), "counters"),
    (lambda: power.measure(lambda: None, [1.0]), "counters"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
