"""Tools for agents being trained."""

from astuner.tools.code_exec import execute_python_code, make_execute_python_code

__all__ = ["execute_python_code", "make_execute_python_code"]
