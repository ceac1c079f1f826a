"""The corpus: the standard library without tests or generated files, split by module, as shipped."""

import hashlib
import json

import pytest

from hwopt.models import checkpoint, corpus


def test_documents_skip_tests_site_packages_and_generated_files():
    docs = corpus.documents()
    paths = [d.path for d in docs]
    assert paths == sorted(paths) and len(paths) > 300
    assert not [p for p in paths if {"test", "tests", "idle_test", "site-packages"} & set(p.split("/")[:-1])]
    assert "encodings/cp1252.py" not in paths and "encodings/__init__.py" in paths
    assert "pydoc_data/topics.py" not in paths


def test_split_is_by_module_and_the_same_every_time():
    train, validation = corpus.split(corpus.documents())
    assert {d.module for d in train}.isdisjoint({d.module for d in validation})
    again = corpus.split(corpus.documents())
    assert [d.path for d in again[1]] == [d.path for d in validation]
    assert 0.01 < sum(d.nbytes for d in validation) / sum(d.nbytes for d in train + validation) < 0.1


def test_shipped_validation_text_is_what_the_manifest_records():
    manifest = json.loads((checkpoint.WEIGHTS_DIR / "corpus_manifest.json").read_text())
    texts = corpus.read_validation(checkpoint.WEIGHTS_DIR / "validation.txt")
    recorded = manifest["validation"]["documents"]
    assert [hashlib.sha256(t.encode()).hexdigest() for t in texts] == [d["sha256"] for d in recorded]
    assert all(corpus.is_validation(m) for m in manifest["validation"]["modules"])
    assert not any(corpus.is_validation(m) for m in manifest["train"]["modules"])
    assert manifest["python"].count(".") == 2 and manifest["train"]["bytes"] > 5_000_000


def test_shipped_calibration_text_is_train_split_text_never_validation():
    manifest = json.loads((checkpoint.WEIGHTS_DIR / "corpus_manifest.json").read_text())
    texts = corpus.read_validation(checkpoint.WEIGHTS_DIR / "calibration.txt")
    recorded = manifest["calibration"]["documents"]
    shas = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    assert shas == [d["sha256"] for d in recorded]
    assert set(shas) <= {d["sha256"] for d in manifest["train"]["documents"]}
    assert not set(shas) & {d["sha256"] for d in manifest["validation"]["documents"]}
    assert not any(corpus.is_validation(m) for m in manifest["calibration"]["modules"])
    assert corpus.CALIBRATION_BYTES <= sum(len(t.encode()) for t in texts) < 2 * corpus.CALIBRATION_BYTES


def test_calibration_documents_are_a_sample_of_train_chosen_by_name():
    train, validation = corpus.split(corpus.documents())
    chosen = corpus.calibration_documents(train, n_bytes=5000, largest=2000)
    assert 5000 <= sum(d.nbytes for d in chosen) and all(d.nbytes <= 2000 for d in chosen)
    assert [d.path for d in chosen] == [d.path for d in corpus.calibration_documents(train[::-1], 5000, 2000)]
    with pytest.raises(ValueError, match="train"):
        corpus.calibration_documents(validation)
