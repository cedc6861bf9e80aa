"""Fixtures of the function API's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def gsm8k_subset(tmp_path, gsm8k_dir):
    """A dataset folder with the first 8 GSM8K rows of each split (train.jsonl, test.jsonl)."""
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    for split in ("train", "test"):
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:8]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder
