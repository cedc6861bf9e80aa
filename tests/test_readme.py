"""The README's config reference is generated from the default YAML and must stay in sync."""

from astuner.config.reference import END, START, render
from tests.conftest import REPO_ROOT


def test_config_reference_in_readme_is_current():
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index(START) + len(START)
    end = text.index(END)
    assert text[start:end] == render(), "regenerate with: python -m astuner.config.reference --write README.md"
