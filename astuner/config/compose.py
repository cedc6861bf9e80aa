"""Compose the run configuration with Hydra.

Layers, later wins: verl_default < trinity_default < astuner_default < the user's file < CLI overrides.
The user's `hydra.searchpath` entries are resolved so the same YAML works from any directory:
`file://astuner/...` is looked up in the cwd first, then in the installed package, then next to the
YAML; `pkg://astuner/...` always means the installed package. A user file without `defaults:` gets the
standard list, and our default folders are always searched last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from astuner.config.seed_keys import DEFAULTS_NAMES
from astuner.config.source_map import SourceMap
from astuner.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_DIRS = [
    PACKAGE_DIR / "default_config",
    PACKAGE_DIR / "default_config" / "verl",
    PACKAGE_DIR / "default_config" / "trinity",
]
STANDARD_DEFAULTS = ["verl_default", "trinity_default", "astuner_default", "_self_"]
_PRIMARY_NAME = "astuner_run_config"


@dataclass
class ComposedConfig:
    """The merged, resolved configuration and where its keys came from."""

    conf_path: Path
    merged: dict[str, Any]
    source: SourceMap
    searchpath: list[str]


def _load_user_yaml(conf_path: Path) -> DictConfig:
    if not conf_path.exists():
        raise ConfigError(f"config file {conf_path} does not exist; pass an existing YAML with --conf")
    if not conf_path.is_file():
        raise ConfigError(f"--conf {conf_path} is a folder, not a YAML file")
    try:
        top = yaml.safe_load(conf_path.read_text(encoding="utf-8"))
        if not isinstance(top, dict):
            kind = "nothing" if top is None else f"a {type(top).__name__} ({str(top)[:40]!r})"
            raise ConfigError(f"{conf_path}: the file must hold a mapping (astuner: ..., hydra: ...), not {kind}")
        loaded = OmegaConf.load(conf_path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{conf_path}:{mark.line + 1}" if mark is not None else str(conf_path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem}") from None
    except (OmegaConfBaseException, UnicodeDecodeError) as exc:
        raise ConfigError(f"{conf_path}: cannot be read as a config: {exc}".splitlines()[0]) from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{conf_path}: the file must hold a mapping (astuner: ..., hydra: ...), not a list")
    return loaded


def _resolve_search_entry(entry: Any, conf_path: Path, where: str) -> str:
    if not isinstance(entry, str):
        raise ConfigError(f"{where}: hydra.searchpath entries must be strings, got {entry!r}")
    if entry.startswith("pkg://astuner"):
        rel = entry[len("pkg://astuner"):].replace(".", "/").strip("/")
        target = PACKAGE_DIR / rel
        if not target.is_dir():
            raise ConfigError(f"{where}: hydra.searchpath entry {entry!r} names no folder of the astuner package")
        return f"file://{target}"
    if not entry.startswith("file://"):
        return entry  # other schemes (pkg://other_package) are Hydra's to resolve
    raw = entry[len("file://"):]
    if Path(raw).is_absolute():
        candidates = [Path(raw)]
    else:
        candidates = [Path.cwd() / raw]
        first = Path(raw).parts[0] if Path(raw).parts else ""
        if first == "astuner":
            candidates.append(PACKAGE_DIR.parent / raw)
        candidates.append(conf_path.parent / raw)
    for cand in candidates:
        if cand.is_dir():
            return f"file://{cand.resolve()}"
    tried = ", ".join(str(c) for c in candidates)
    raise ConfigError(f"{where}: hydra.searchpath entry {entry!r} is not a folder (tried {tried}); "
                      f"fix the path or use pkg://astuner/default_config")


def quote_plugin_override(override: str) -> str:
    """`key=pkg.mod->Name` as typed (in shell quotes) becomes `key='pkg.mod->Name'`: Hydra's override lexer
    takes '>' only inside quotes."""
    key, sep, value = override.partition("=")
    if not sep or "->" not in value or value[:1] in ("'", '"'):
        return override
    return f"{key}='" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check_overrides(overrides: list[str]) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"command-line override '{override}' is not valid: {first}; "
                              f"write key=value, +new.key=value or ~key") from None


def _absent_key(override: str, message: str) -> str:
    """Hydra could not set `override`'s key: it is not in the composed config. A key astuner declares (in a section
    that is null by default, such as model.lora) or one inside a free-form mapping (rollout.workflow_args) is added
    with '+'; any other astuner key is unknown, and '+' would only be refused later: say which key was meant."""
    from astuner.config.keys import declared
    from astuner.config.schema import AstunerConfig

    key, _, value = override.lstrip("+~").partition("=")
    if not key.startswith("astuner."):
        return message
    items = {item.path: item for item in declared(AstunerConfig)}
    if key in items and items[key].optional_section is not None:  # the section itself, null by default
        return f"{key} is null by default: set it with +{key}={value}"
    parts = key.split(".")
    for i in range(len(parts) - 1, 1, -1):
        item = items.get(".".join(parts[:i]))
        if item is None:
            continue
        if item.optional_section is not None and key in items:
            return f"{item.path} is null by default: set its keys with +{key}={value}"
        if not item.is_section and item.optional_section is None and _is_mapping(item.type):
            return f"{item.path} is a free-form mapping, empty by default: add to it with +{key}={value}"
        break
    from astuner.config.validate import nearest_key

    return f"unknown key '{key}'; " + (nearest_key(key) or "--dry-run prints every key the config has")


def _is_mapping(tp: Any) -> bool:
    import collections.abc
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) is typing.Union else [tp]
    return any(a is dict or typing.get_origin(a) in (dict, collections.abc.Mapping) for a in args)


def _default_shape() -> dict[str, Any]:
    """The tree of the standard defaults (astuner's, verl's, Trinity's), as plain YAML."""
    shape: dict[str, Any] = {}
    for name in STANDARD_DEFAULTS[:-1]:
        for folder in DEFAULT_CONFIG_DIRS:
            if (folder / f"{name}.yaml").is_file():
                loaded = yaml.safe_load((folder / f"{name}.yaml").read_text(encoding="utf-8")) or {}
                shape.update({k: v for k, v in loaded.items() if k != "defaults"})
    return shape


def unknown_top_keys(keys: list[str], known: set[str]) -> str:
    """'astunr (did you mean astuner?), foo': the keys of `keys` not in `known`, each with its nearest known key."""
    import difflib

    out = []
    for key in keys:
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            out.append(f"{key} (did you mean {near[0]}?)" if near else key)
    return ", ".join(out[:4]) + (f" and {len(out) - 4} more" if len(out) > 4 else "")


def _check_top_level(tree: dict[str, Any], conf_path: Path) -> None:
    """A file with no astuner: section whose top-level keys are no config's (misspelt): said by those keys, not
    by the astuner keys left unset."""
    if "astuner" in tree:
        return
    unknown = unknown_top_keys(list(tree), {*_default_shape(), "astuner", "defaults", "hydra", "data_processor"})
    if unknown:
        raise ConfigError(f"{conf_path}: no astuner: section, and these top-level keys are no config section: "
                          f"{unknown}")


def _check_sections(tree: dict[str, Any], src: SourceMap) -> None:
    """ConfigError at the first key of the user's YAML that the defaults hold as a section (a mapping of keys)
    but the file gives as a list or a value."""
    shape = _default_shape()

    def walk(user: Any, default: Any, prefix: str) -> None:
        for key, value in user.items():
            dotted = f"{prefix}{key}"
            known = default.get(key) if isinstance(default, dict) else None
            if isinstance(known, dict) and value is not None and not isinstance(value, dict):
                kind = f"a list ({str(value)[:40]})" if isinstance(value, list) else f"the value {str(value)[:40]!r}"
                raise ConfigError(f"{src.where(dotted)}: {dotted} must be a section (a mapping of its keys, such as "
                                  f"{', '.join(list(known)[:3])}), not {kind}")
            if isinstance(known, dict) and isinstance(value, dict):
                walk(value, known, dotted + ".")

    walk({k: v for k, v in tree.items() if k not in ("defaults", "hydra")}, shape, "")


def compose_config(conf_path: Path | str, overrides: list[str] | None = None) -> ComposedConfig:
    """Merge defaults, the user's YAML and overrides; resolve interpolations; keep key locations."""
    from hydra import compose, initialize
    from hydra.core.config_store import ConfigStore
    from hydra.errors import HydraException, MissingConfigException

    overrides = [quote_plugin_override(o) for o in overrides or []]
    conf_path = Path(conf_path).absolute()
    user = _load_user_yaml(conf_path)
    src = SourceMap(conf_path, overrides)
    _check_overrides(overrides)

    user_search = OmegaConf.select(user, "hydra.searchpath", default=None)
    if user_search is not None and not OmegaConf.is_list(user_search):
        raise ConfigError(f"{src.where('hydra.searchpath')}: hydra.searchpath must be a list of folders")
    searchpath: list[str] = []
    entries = [(e, src.where(f"hydra.searchpath[{i}]")) for i, e in enumerate(user_search or [])]
    entries += [(f"file://{d}", "astuner") for d in [conf_path.parent, *DEFAULT_CONFIG_DIRS]]
    for entry, where in entries:
        resolved = _resolve_search_entry(entry, conf_path, where)
        if resolved not in searchpath:
            searchpath.append(resolved)

    primary = OmegaConf.to_container(user, resolve=False)
    _check_top_level(primary, conf_path)
    defaults = primary.pop("defaults", None)
    if defaults is None:
        defaults = list(STANDARD_DEFAULTS)
    elif not isinstance(defaults, list):
        raise ConfigError(f"{src.where('defaults')}: defaults must be a list such as {STANDARD_DEFAULTS}")
    else:  # the seed system's name of astuner's defaults (seed_keys.py)
        defaults = [DEFAULTS_NAMES.get(entry, entry) if isinstance(entry, str) else entry for entry in defaults]
    hydra_node = primary.pop("hydra", None) or {}
    if not isinstance(hydra_node, dict):
        raise ConfigError(f"{src.where('hydra')}: hydra must be a mapping")
    hydra_node["searchpath"] = searchpath
    primary["defaults"] = defaults
    primary["hydra"] = hydra_node
    ConfigStore.instance().store(name=_PRIMARY_NAME, node=primary, provider="astuner")

    try:
        with initialize(version_base="1.3", config_path=None):
            cfg = compose(config_name=_PRIMARY_NAME, overrides=overrides)
    except MissingConfigException as exc:
        missing = getattr(exc, "missing_cfg_file", None) or str(exc).strip().splitlines()[0]
        raise ConfigError(f"{src.where('defaults')}: defaults entry {missing!r} was not found in the "
                          f"{len(searchpath)} folders of hydra.searchpath; check defaults and hydra.searchpath") from None
    except (HydraException, OmegaConfBaseException) as exc:
        _check_sections(primary, src)  # "Cannot merge DictConfig with ListConfig": say which key, on which line
        message = " ".join(str(exc).split())
        message = message.replace(f"'{_PRIMARY_NAME}'", str(conf_path))
        culprit = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") in message), None)
        where = f"command-line override '{culprit}'" if culprit else str(conf_path)
        if culprit and message.startswith("Could not override"):
            message = _absent_key(culprit, message)
        raise ConfigError(f"{where}: {message}") from None

    if "data_processor" in cfg and "astuner" in cfg:  # Trinity's top-level name for the experience pipeline
        OmegaConf.set_struct(cfg, False)
        cfg.astuner.data_processor = OmegaConf.merge(cfg.astuner.get("data_processor", {}), cfg.data_processor)
        del cfg["data_processor"]
    try:
        merged = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        message = " ".join(str(exc).split("\n")[0].split())
        where = src.where(key) if key != "?" else str(conf_path)
        raise ConfigError(f"{where}: cannot resolve '{key}': {message}") from None
    return ComposedConfig(conf_path=conf_path, merged=merged, source=src, searchpath=searchpath)
