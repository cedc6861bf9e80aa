"""How a config key is declared: once, in `schema.py` (or `schema_trainer.py`), as a dataclass field made by
`key()` (or `section()`).

The declaration holds the key's type (the field's annotation), default, help text, allowed values, bounds, the
rule it must follow, and the backbones that read it. From it come the default YAML and its comments, the
reference table in docs/configuration.md (`reference.py`), the validator's single-key checks (`validate.py`) and
the notes about keys a backbone does not read. `set_path` sets a dotted key in a tree (the config importers').
"""

from __future__ import annotations

import copy
import dataclasses
import math
import difflib
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

ALL_BACKBONES = ("debug", "verl", "trinity")
# the backbones a key is read by (`key(backbones=...)`)
DEBUG, VERL, TRINITY = ("debug",), ("verl",), ("trinity",)
DISTRIBUTED = ("verl", "trinity")
NOT_VERL = ("debug", "trinity")  # verl samples tasks, keeps episodes and groups by its own rules
NOT_TRINITY = ("debug", "verl")


@dataclass(frozen=True)
class Spec:
    help: str
    choices: tuple[str, ...] = ()  # allowed values (of each item, for a list)
    aliases: tuple[str, ...] = ()  # accepted too, not shown as choices in the docs
    gt: Optional[float] = None
    ge: Optional[float] = None
    lt: Optional[float] = None
    le: Optional[float] = None
    why: str = ""  # said after a bound: "must be above 1 (why), got 0.5"
    rule: Optional[Callable[[Any], bool]] = None  # any other single-key condition, with `must` saying it
    must: str = ""
    required: str = ""  # how to set it, when null or "" is not allowed
    backbones: tuple[str, ...] = ALL_BACKBONES
    # the error's wording when the default one does not fit; fields: {path} {value} {hint} {choices}; or a
    # function (path, value) -> the wording, where the value is too long to show whole (a mapping of sections)
    message: Any = ""

    def problem(self, path: str, value: Any) -> Optional[str]:
        """What is wrong with `value` (already of the declared type) at `path`, in one sentence, or None."""
        if value is None:
            return None
        if self.rule is not None and not self.rule(value):
            return self.say(path, value) or f"{path} must be {self.must}, got {value!r}"
        if self.choices and not isinstance(value, list) and value not in self.choices + self.aliases:
            return self.choice_problem(path, value)
        # nan and ±inf are no setting of any key: every comparison with nan is false (it would pass any bound),
        # and no key means "unlimited" by inf (null does where that has a meaning: episode_timeout_s)
        for where, item in ([(f"{path}[{i}]", x) for i, x in enumerate(value)] if isinstance(value, list)
                            else [(path, value)]):
            if isinstance(item, float) and not math.isfinite(item):
                return f"{where} must be {self.finite_text()}{f' ({self.why})' if self.why else ''}, got {item}"
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not self.in_bounds(value):
            return f"{path} must be {self.bounds_text()}{f' ({self.why})' if self.why else ''}, got {value}"
        return None

    def finite_text(self) -> str:
        """What a number of this key must be, for a non-finite one: 'a finite number in (0, 1]'."""
        bounds = self.bounds_text()
        return "a finite positive number" if bounds == "positive" else f"a finite number {bounds}".rstrip()

    def choice_problem(self, path: str, value: Any) -> Optional[str]:
        """`value` (one item of a list at `path`, or the key's value) is not an allowed one: which are."""
        if value in self.choices + self.aliases:
            return None
        close = difflib.get_close_matches(str(value), self.choices, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return self.say(path, value, hint) or f"{path} {value!r} is not valid; {hint}choose one of " \
                                              f"{', '.join(self.choices)}"

    def say(self, path: str, value: Any, hint: str = "") -> str:
        if callable(self.message):
            return self.message(path, value)
        return self.message.format(path=path, value=value, hint=hint, choices=", ".join(self.choices))

    def in_bounds(self, value: float) -> bool:
        return not ((self.gt is not None and value <= self.gt) or (self.ge is not None and value < self.ge)
                    or (self.lt is not None and value >= self.lt) or (self.le is not None and value > self.le))

    def bounds_text(self) -> str:
        low = ("(", self.gt) if self.gt is not None else ("[", self.ge) if self.ge is not None else None
        high = (")", self.lt) if self.lt is not None else ("]", self.le) if self.le is not None else None
        if low and high:
            return f"in {low[0]}{_num(low[1])}, {_num(high[1])}{high[0]}"
        if low == ("(", 0):
            return "positive"
        if low:
            return f"above {_num(low[1])}" if low[0] == "(" else f">= {_num(low[1])}"
        if high:
            return f"below {_num(high[1])}" if high[0] == ")" else f"<= {_num(high[1])}"
        return ""

    def shown_constraint(self) -> str:
        """The constraint as the reference table shows it."""
        if self.choices:
            return " / ".join(self.choices)
        if self.rule is not None:
            return self.must
        return self.bounds_text()


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """`tree[a][b][c] = value` for "a.b.c", making the mappings on the way."""
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def key(default: Any, help: str, **spec: Any) -> Any:
    """A config key: its default and its `Spec` (help, choices, bounds, rule, required, backbones)."""
    meta = {"spec": Spec(help=help, **{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in spec.items()})}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type, help: Optional[str] = None) -> Any:
    """A nested mapping of keys (`cls`, a dataclass of `key()` fields); its help defaults to cls's docstring."""
    return dataclasses.field(default_factory=cls, metadata={"spec": Spec(help=help or (cls.__doc__ or "").strip())})


def spec_of(f: dataclasses.Field) -> Spec:
    spec = f.metadata.get("spec")
    if spec is None:
        raise TypeError(f"config field {f.name} is not declared with key() or section()")
    return spec


@dataclass(frozen=True)
class Declared:
    path: str  # astuner.rollout.num_repeat
    type: Any
    default: Any
    spec: Spec
    optional_section: Optional[type] = None  # the dataclass of a section that is null unless set (model.lora)

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.type)


def nested_dataclass(tp: Any) -> Optional[type]:
    """The dataclass in `tp` (itself, or inside Optional[...]), or None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) is typing.Union:
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return inner[0] if inner else None
    return None


def declared(cls: type, prefix: str = "astuner", inside_optional: bool = False) -> Iterator[Declared]:
    """Every key and section under `cls`, depth first in declaration order; keys of optional sections too."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        path = f"{prefix}.{f.name}"
        nested = nested_dataclass(tp)
        optional = nested if nested is not None and not dataclasses.is_dataclass(tp) else None
        yield Declared(path, tp, default, spec_of(f), optional)
        if nested is not None:
            yield from declared(nested, path, inside_optional or optional is not None)


def spec_at(root: type, path: str) -> Spec:
    """The `Spec` of the key at dotted `path` (astuner.rollout.engine)."""
    for item in declared(root):
        if item.path == path:
            return item.spec
    raise KeyError(path)


def default_tree(cls: type) -> dict[str, Any]:
    """The defaults of `cls` as a plain mapping (what the default YAML holds)."""
    return dataclasses.asdict(cls())


def unread_by(cfg: Any, backbone: str) -> list[str]:
    """Keys set to something other than their default that `backbone` does not read (they would do nothing)."""
    out = []
    for item in declared(type(cfg)):
        if item.is_section or backbone in item.spec.backbones:
            continue
        node: Any = cfg
        for part in item.path.split(".")[1:]:
            node = getattr(node, part, None) if node is not None else None
        if node is not None and node != item.default and not any(item.path.startswith(p + ".") for p in out):
            out.append(item.path)
    return out
