"""The one reader of an amount a person types: the import reader, with the currency's symbol in
front and "," between thousands, and a message that says what to type instead."""

import pytest

from refunds.currencies import BadAmount, read_typed


@pytest.mark.parametrize(
    ("typed", "currency", "minor"),
    [
        ("12.50", "USD", 1250),
        ("$12.50", "USD", 1250),
        ("  $ 1,020.50 ", "USD", 102050),
        ("5.5", "USD", 550),
        ("€8.99", "EUR", 899),
        ("¥500", "JPY", 500),
        ("1.250", "KWD", 1250),
    ],
)
def test_amounts_are_read_as_people_write_them(typed, currency, minor):
    assert read_typed(typed, currency) == minor


@pytest.mark.parametrize(
    ("typed", "currency", "says"),
    [
        ("１２", "USD", "“１２” is not an amount in US dollars: write it like 12.50"),
        ("1e3", "USD", "“1e3” is not an amount in US dollars: write it like 12.50"),
        ("١٢", "USD", "with the digits 0-9"),
        ("NaN", "USD", "with the digits 0-9"),
        ("1,0,0", "USD", "with the digits 0-9"),
        ("-5", "USD", "it is negative"),
        ("20.005", "USD", "USD has 2 digit(s) after the point"),
        ("5.5", "JPY", "“5.5” is not an amount in Japanese yen: JPY has no digit(s)"),
        ("99999999999", "USD", "it is too large"),
        ("€5", "USD", "with the digits 0-9"),  # another currency's symbol
        ("5", "XXX", "'XXX' is not a currency in use"),
    ],
)
def test_anything_else_is_refused_with_what_to_type_instead(typed, currency, says):
    with pytest.raises(BadAmount) as refused:
        read_typed(typed, currency)
    assert says in str(refused.value)
