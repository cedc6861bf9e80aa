"""Importers of other frameworks' configs."""
