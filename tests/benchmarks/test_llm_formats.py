"""benchmarks.llm_formats: the trained model's formats as a report section, in the schema and the Markdown."""

import pytest

from benchmarks import llm_formats, report
from tests.benchmarks.support import fake_doc


def test_the_section_measures_every_format_live(monkeypatch):
    monkeypatch.setattr(llm_formats, "QUICK_WINDOWS", 1)
    section = llm_formats.measure(quick=True, model="draft")
    rows = {r["precision"]: r for r in section["rows"]}
    assert set(rows) == set(llm_formats.llm_accuracy.PRECISIONS)
    assert rows["fp32"]["top1_agreement"] == 1.0 and rows["fp32"]["bytes_per_weight"] == 4.0
    assert rows["int4_g128"]["bytes_per_weight"] == pytest.approx(0.515625)
    assert "first 1 windows of 512 tokens" in section["notes"][0]


def test_the_section_fits_the_schema_and_shows_three_decimals():
    doc = fake_doc()
    doc["llm_formats"] = {"rows": [{"precision": "int8", "bytes_per_weight": 1.0066, "perplexity": 112.743,
                                    "top1_agreement": 0.9941}], "notes": ["on a slice"]}
    report.validate(doc)
    text = report.render_markdown(doc)
    assert "## 5. The course's trained LLM" in text and "| int8 | 1.007 | 112.743 | 99.4% |" in text
    doc["llm_formats"]["rows"][0].pop("perplexity")
    with pytest.raises(report.jsonschema.ValidationError):
        report.validate(doc)
    del doc["llm_formats"]
    assert "trained LLM" not in report.render_markdown(report.validate(doc))  # older reports have none
