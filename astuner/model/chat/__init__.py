"""Chat rendering and parsing: messages to prompt tokens, replies to tool calls and reasoning."""
