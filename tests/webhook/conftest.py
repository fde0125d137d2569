"""Fixtures of the webhook tests: the test Kubernetes API server's (the replica tests, `--coordination
kubernetes`), a state directory, and the local PagerDuty REST API that the note tests post to."""

import pytest

from tests.standin.conftest import apiserver, k8s, kubeconfig  # noqa: F401  (fixtures)
from tests.webhook.pagerduty_api import FakePagerDuty


@pytest.fixture
def pd(tmp_path):
    fake = FakePagerDuty(tmp_path)
    yield fake
    fake.close()


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"
