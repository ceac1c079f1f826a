"""models.classifier: digits load without downloads, the MLP learns them, accuracy helpers are exact."""

import math

import numpy as np
import pytest
import torch

from hwopt.models import classifier


@pytest.fixture(scope="module")
def data():
    return classifier.load_digits()


def test_load_digits_split_shapes_and_range(data):
    n = len(data.y_train) + len(data.y_test)
    assert n == 1797 and data.x_train.shape[1] == classifier.N_FEATURES
    assert len(data.y_test) == round(1797 * 0.2)
    assert float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    again = classifier.load_digits()
    assert torch.equal(again.y_test, data.y_test)  # fixed shuffle


def test_make_classifier_layers():
    model = classifier.make_classifier(hidden=32, n_hidden_layers=3)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 32), (32, 32), (32, 32), (32, 10)]


def test_training_learns_the_digits(data):
    model = classifier.make_classifier(hidden=64)
    before = classifier.accuracy(model, data.x_test, data.y_test)
    classifier.train(model, data, epochs=3)
    after = classifier.accuracy(model, data.x_test, data.y_test)
    assert not model.training and after > 0.85 and after > before


def test_accuracy_and_agreement_with_numpy_predictors():
    x = torch.zeros(4, 3)
    y = torch.tensor([0, 1, 2, 2])

    def predict(x):
        return np.eye(3)[[0, 1, 2, 0]]

    assert classifier.accuracy(predict, x, y) == 0.75
    assert classifier.agreement(predict, lambda x: torch.tensor(np.eye(3)[[0, 1, 2, 2]]), x) == 0.75


def tiny_digits():
    x, y = torch.rand(8, classifier.N_FEATURES), torch.arange(8) % classifier.N_CLASSES
    return classifier.Digits(x, y, x, y)


def nan_digits():
    data = tiny_digits()
    data.x_train[3, 5] = math.nan
    return data


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: classifier.load_digits(test_fraction=1.5), "test_fraction"),
        (lambda: classifier.make_classifier(hidden=0), "hidden"),
        (lambda: classifier.make_classifier(n_hidden_layers=0), "n_hidden_layers"),
        (lambda: classifier.train(classifier.make_classifier(8), tiny_digits(), epochs=0), "epochs"),
        (lambda: classifier.train(classifier.make_classifier(8), tiny_digits(), epochs=10**30), "epochs"),
        (lambda: classifier.train(classifier.make_classifier(8), tiny_digits(), batch_size=0), "batch_size"),
        (lambda: classifier.train(classifier.make_classifier(8), tiny_digits(), lr=0), "lr"),
        (lambda: classifier.train(classifier.make_classifier(8), tiny_digits(), lr=math.inf), "lr"),
        (lambda: classifier.train(classifier.make_classifier(8), None), "data"),
        (lambda: classifier.make_classifier(hidden=True), "hidden"),
        (lambda: classifier.accuracy(lambda x: x, torch.zeros(2, 3), torch.zeros(3, dtype=torch.long)),
         "same length"),
        (lambda: classifier.accuracy(lambda x: torch.zeros(5), torch.zeros(2, 3), torch.zeros(2).long()),
         "logits"),
        (lambda: classifier.accuracy(lambda x: x, torch.zeros(2, 3), torch.zeros(2)), "y must be"),
        (lambda: classifier.accuracy(lambda x: x, torch.full((2, 3), math.nan), torch.zeros(2).long()),
         "x must be"),
        (lambda: classifier.train(classifier.make_classifier(8), nan_digits()), "x_train"),
        (lambda: classifier.agreement(lambda x: x, lambda x: x, torch.zeros(0, 3)), "non-empty"),
    ],
)
def test_bad_input(call, match):
    """Each bad argument is named (the checker itself: tests/test_arguments.py)."""
    with pytest.raises(ValueError, match=match):
        call()
