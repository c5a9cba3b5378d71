"""Loaded before Django (`-p tests.environment` in pyproject.toml): tests run as production does,
DEBUG off, so they need a SECRET_KEY; worker processes the tests start inherit it."""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-" + "k" * 50)
# The tests use fakes on purpose (locmem and console mail, the demo gateway) without the demo.
os.environ.setdefault("REFUNDS_ALLOW_FAKES", "true")
