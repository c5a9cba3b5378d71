"""The gateways' package (refunds/payments/): the gateway comes from the REFUNDS_GATEWAY setting,
by its module's path or by the shorter path deployments already name. Each gateway's own promises
are tested beside it: test_payments_demo.py, test_payments_http.py, test_payments_stripe.py."""

from __future__ import annotations

import pytest

from refunds import payments
from refunds.payments import get_gateway
from refunds.payments.demo import DemoGateway
from refunds.payments.http import HttpGateway


def test_the_gateway_comes_from_the_setting(settings):
    assert settings.REFUNDS_GATEWAY == "refunds.payments.DemoGateway"
    assert isinstance(get_gateway(), DemoGateway)


@pytest.mark.parametrize(
    ("path", "gateway"),
    [
        ("refunds.payments.DemoGateway", DemoGateway),
        ("refunds.payments.demo.DemoGateway", DemoGateway),
        ("refunds.payments.HttpGateway", HttpGateway),
        ("refunds.payments.http.HttpGateway", HttpGateway),
    ],
)
def test_a_gateway_is_named_by_its_module_or_by_the_path_deployments_already_use(
    settings, request, path, gateway
):
    settings.REFUNDS_GATEWAY = path
    settings.REFUNDS_GATEWAY_URL = "http://127.0.0.1:9"
    get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(get_gateway.cache_clear)

    assert type(get_gateway()) is gateway


def test_the_stripe_gateway_keeps_its_old_path_too():
    from refunds.payments.stripe import StripeGateway

    assert payments.StripeGateway is StripeGateway
