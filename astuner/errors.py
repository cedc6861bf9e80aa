"""Error types. A `UserError` is something the user can fix (config, plug-in string, data); the CLI
prints its one-line message and exits with code 2. `RunFailed`: a run that failed with a cause the backbone
reported; one line, exit 1. Anything else is an internal failure (traceback, exit 1)."""


class AstunerError(Exception):
    """Base class of astuner's own errors."""

    exit_code = 1


class UserError(AstunerError):
    """A mistake the user can fix; the message says what, where, and how."""

    exit_code = 2


class ConfigError(UserError):
    """The composed configuration is invalid."""


class PluginError(UserError):
    """A `module->Name` / `file.py->Name` plug-in string cannot be resolved."""


class DataError(UserError):
    """A dataset, data file or environment service cannot be read."""


class EnvServiceError(DataError):
    """An environment service is unreachable or answered with an error."""


class BackboneUnavailable(UserError):
    """The requested backbone is not part of this version or its extra is not installed."""


class RunDirError(UserError):
    """The run folder cannot be used as asked (e.g. it already holds a run)."""


class RunFailed(AstunerError):
    """A run that started and failed where the backbone itself reports the cause (exit code 1, one line)."""


class StorageError(RunFailed):
    """A write the run needed was refused by its disk (full, over quota, read-only, not writable): one line
    naming the path, exit code 1; every complete checkpoint is kept."""
