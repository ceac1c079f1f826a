"""benchmarks.__main__: the machine card shows the probe medians of section one."""


from benchmarks import report
from benchmarks.__main__ import measured_probe
from tests.benchmarks.support import fake_doc, rate


def test_the_machine_card_shows_the_probe_medians_of_section_one():
    probe = measured_probe({"fidelity": {"rows": fake_doc()["fidelity"]["rows"] + [report.fidelity_row(
        "FLOP/s probe / best sgemm", rate("p", (90.0, 100.0), "GFLOP/s"), rate("b", (110.0,), "GFLOP/s"))]}})
    assert probe.bandwidth_gbs == 10.0 and probe.flops_by_precision == {"fp32": 95.0e9}
    assert measured_probe({"fidelity": {"rows": []}}) is None
