"""The trainable model (`ModelTuner`) and what it records."""
