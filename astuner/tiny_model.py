"""`python -m astuner.tiny_model DIR`, the path older notes give, for `python -m astuner.model.tiny_model DIR`."""

from astuner.model.tiny_model import build_tiny_model, main

__all__ = ["build_tiny_model", "main"]

if __name__ == "__main__":
    main()
