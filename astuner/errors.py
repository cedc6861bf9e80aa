"""Error types. A `UserError` is something the user can fix (config, plug-in string, data); the CLI
prints its one-line message and exits with code 2. `RunFailed`: a run that failed with a cause the backbone
reported; one line, exit 1. Anything else is an internal failure (traceback, exit 1). The checks before a run
report every problem they find (`Found`), one line each (`Problems`)."""

from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")


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


class BadModelInput(ValueError):
    """Messages or tools a model call cannot take (the caller's to fix, e.g. an image block, an unknown role): the
    AgentScope route raises it to the agent, the OpenAI gateway answers 400 with its message."""


class Problems(UserError):
    """Several problems the checks before a run found together (a dry run's, or a refused run's): `lines`, one
    problem each, said one per line (exit code 2)."""

    def __init__(self, lines: "str | list[str]"):
        self.lines = lines.split("\n") if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class ConfigProblems(Problems, ConfigError):
    """Several problems of one configuration (its validation): said one per line, as `Problems`."""


class Found:
    """What the checks before a run found: each check runs whatever the others found (where it does not depend on
    them), and every problem is reported together (`raise_all`), not only the first. `bad_keys`: config keys
    whose values were refused; a check reading one of them is skipped (its value is not the user's)."""

    def __init__(self) -> None:
        self.errors: list[UserError] = []
        self.bad_keys: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.errors)

    def add(self, exc: UserError) -> None:
        if isinstance(exc, Problems):
            kind = ConfigError if isinstance(exc, ConfigError) else UserError
            self.errors += [kind(line) for line in exc.lines]
        else:
            self.errors.append(exc)

    def refused(self, lines: "list[str]", keys: "set[str]") -> None:
        """The config's validation refused `keys`, saying `lines` (one problem each)."""
        self.errors += [ConfigError(line) for line in lines]
        self.bad_keys |= keys

    def sound(self, *prefixes: str) -> bool:
        """Whether no refused key is one of `prefixes` or lies under (or above) one."""
        return not any(bad == p or bad.startswith(p + ".") or p.startswith(bad + ".")
                       for bad in self.bad_keys for p in prefixes)

    def attempt(self, check: "Callable[..., T]", *args: Any, **kwargs: Any) -> "tuple[bool, Optional[T]]":
        """(True, what `check` returned), or (False, None) with its UserError kept. With keys refused, a check
        that fails otherwise is taken as failing on a value that is not the user's: skipped, the refusal said."""
        try:
            return True, check(*args, **kwargs)
        except UserError as exc:
            self.add(exc)
        except Exception:
            if not self.bad_keys:
                raise
        return False, None

    def raise_all(self, explain: "Callable[[Exception], Exception]" = lambda exc: exc) -> None:
        """Nothing found: return. One problem: its own error (its type kept); several: `Problems`, one line each
        (a problem said by two checks, once). `explain` rewords each (tune(): the arguments that set a key)."""
        if not self.errors:
            return
        errors = [explain(exc) for exc in self.errors]
        if len(errors) == 1:
            raise errors[0]
        lines = [" ".join(str(exc).split("\n")) for exc in errors]
        raise Problems(list(dict.fromkeys(lines)))
