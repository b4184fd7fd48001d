"""No module of the package or the sample services grows past 400 lines: past that, a module
holds more than one concept (issue 27's rule, kept by this test rather than by review)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_no_module_is_over_the_limit() -> None:
    modules = [
        path
        for folder in ("boost_tenancy", "services")
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    assert len(modules) > 100, "the walk found too few modules: is ROOT the project?"
    over = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not over, f"modules over {LIMIT} lines: {over}"
