"""A mistyped BOOST_* variable is refused at start-up, naming the nearest known one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from boost_tenancy.application.environment import connect_options_from_env
from boost_tenancy.envvars import KNOWN_VARIABLES, RENAMED, unknown_variables
from boost_tenancy.errors import ConfigError


def test_a_mistyped_variable_is_refused_with_the_nearest_known_name() -> None:
    with pytest.raises(ConfigError, match=r"BOOST_WORKER \(did you mean BOOST_WORKERS\?\)"):
        connect_options_from_env({"BOOST_WORKER": "8"})


def test_every_unknown_variable_is_named_and_others_are_left_alone() -> None:
    env = {
        "BOOST_WORKERS": "8",
        "BOOST_PREFECTH": "5",
        "BOOST_QQQQQQQQQQQQ": "1",
        "BOOST_TEST_BROKER_FLAVOUR": "artemis",
        "PATH": "/usr/bin",
        "MY_BOOST_X": "1",
    }
    assert unknown_variables(env) == [
        "BOOST_PREFECTH (did you mean BOOST_PREFETCH?)",
        "BOOST_QQQQQQQQQQQQ",
    ]


def test_a_renamed_variable_still_names_its_replacement() -> None:
    with pytest.raises(ConfigError, match="BOOST_STOMP_USER -> BOOST_BROKER_USER"):
        connect_options_from_env({"BOOST_STOMP_USER": "x"})


def test_every_variable_the_docs_name_is_known() -> None:
    """docs/configuration.md is the list a user reads: what it names must be accepted."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    named = set(re.findall(r"`(BOOST_[A-Z0-9_]+)`", text))
    renamed = set(RENAMED)
    assert not {
        n
        for n in named - KNOWN_VARIABLES - renamed
        if not n.startswith("BOOST_TEST_") and not n.endswith("_")
    }
