"""astuner's own model: the trainable chat model, chat rendering and tool parsing, the inference engines."""
