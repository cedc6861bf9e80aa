"""`astuner traces`: a trace store's episodes listed, checked against a model's chat template (re-render), and chat
logs imported into it: importer.py (OpenAI-format JSON lines), cli.py."""
