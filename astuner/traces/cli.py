"""`astuner traces`: what a trace store holds, checked against a model's chat template, and logs imported into it.

    astuner traces list FILE                                  # the episodes: source, calls, reward
    astuner traces check FILE --model MODEL                   # the re-render check of every episode
    astuner traces import LOG --store FILE --model MODEL       # OpenAI-format chat logs (JSON lines) or AgentScope
                                                              # Studio's database.sqlite, rendered and checked
    astuner traces judge FILE --conf X.yaml [--judge PLUGIN]  # rewards from a config's judge, after the fact

Exit codes as the other commands': 0, 2 a user error (one line), 1 internal."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from astuner.cli_args import OneLineParser, run_command

SHOWN = 20  # episodes named on the terminal (the --json report names them all)


JUDGE = "Rewards for the store's episodes from a config's judge, which reads each stored conversation."


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="astuner traces",
                           description="List, check, import and judge the traces of an agent in use (a trace store).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,check,import,judge}")
    listing = commands.add_parser("list", help="the store's episodes",
                                  description="The store's episodes: id, source, calls, reward.")
    listing.add_argument("store", metavar="FILE", help="the trace store (SQLite; astuner serve --store writes one)")
    check = commands.add_parser("check", help="the re-render check of every episode against MODEL's chat template",
                                description="Whether each episode's messages, rendered again by MODEL's chat template, "
                                            "give the tokens recorded (prompts and replies), and why not.")
    check.add_argument("store", metavar="FILE", help="the trace store")
    check.add_argument("--model", required=True, metavar="MODEL", help="the model that will be trained (its tokenizer)")
    check.add_argument("--json", action="store_true", help="the whole report as JSON on stdout")
    imports = commands.add_parser("import", help="OpenAI-format chat logs (JSON lines) or AgentScope Studio's trace "
                                                 "database into a store",
                                  description="Render a chat log (JSON lines) or AgentScope Studio's trace database "
                                              "through MODEL's chat template into a trace store; each episode whole "
                                              "or not at all.")
    imports.add_argument("log", metavar="LOG", help="a JSON-lines chat log, or Studio's database.sqlite")
    imports.add_argument("--format", choices=["auto", "openai", "studio"], default="auto",
                         help="what LOG is (default: auto: a SQLite file is Studio's database, else JSON lines)")
    imports.add_argument("--store", required=True, metavar="FILE", help="the trace store (created when absent)")
    imports.add_argument("--model", required=True, metavar="MODEL",
                         help="the model that will be trained: its chat template renders the log")
    imports.add_argument("--json", action="store_true", help="the whole report as JSON on stdout")
    judge_arguments(commands.add_parser("judge", help="rewards for the store's episodes from a config's judge",
                                        description=JUDGE))
    return parser


def judge_arguments(judge: argparse.ArgumentParser) -> argparse.ArgumentParser:
    judge.add_argument("store", metavar="FILE", help="the trace store (written to: no astuner serve may hold it)")
    judge.add_argument("--conf", required=True, metavar="PATH",
                       help="the experiment YAML whose judge (astuner.task_judge) and auxiliary models score")
    judge.add_argument("--judge", metavar="PLUGIN",
                       help="this judge instead of the config's (module->Name or path.py->Name)")
    judge.add_argument("--all", action="store_true",
                       help="judge every episode (default: those without a reward; a user's verdict is kept)")
    judge.add_argument("--concurrency", type=int, default=16, metavar="N", help="episodes judged at once (16)")
    judge.add_argument("--json", action="store_true", help="the whole report as JSON on stdout")
    judge.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra-style config overrides")
    return judge


def main(argv: Sequence[str]) -> int:
    if list(argv[:1]) == ["judge"]:  # overrides may follow the options: parsed intermixed, which subparsers cannot be
        return run_command(judge_arguments(OneLineParser(prog="astuner traces judge", description=JUDGE)), _judge,
                           argv[1:],
                           intermixed=True)
    commands = {"list": _list, "check": _check, "import": _import}
    return run_command(build_parser(), lambda args: commands[args.command](args), argv)


def _tokenizer(model: str) -> Any:
    from astuner.evaluate.candidates import parse
    from astuner.model.engines.factory import load_tokenizer
    from astuner.records.progress import quiet_libraries

    quiet_libraries()
    folder = parse(model).folder
    if folder is None:
        from astuner.errors import DataError

        raise DataError("--model: name a model folder or a checkpoint (its tokenizer renders the traces)")
    return load_tokenizer(str(folder), "--model")


def _context(model: str) -> Optional[int]:
    """The model's context (its config's max_position_embeddings), when it says."""
    from astuner.evaluate.candidates import parse

    config = parse(model).folder / "config.json"
    try:
        found = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return int(found) if isinstance(found, int) and found > 0 else None


def _list(args: argparse.Namespace) -> int:
    from astuner.records.trace_store import TraceStore

    episodes = TraceStore.read(Path(args.store)).episodes()
    width = max([len("episode"), *(len(e["id"]) for e in episodes)])
    print(f"{'episode':<{width}}  {'source':<16}  calls  reward")
    for e in episodes:
        reward = "-" if e["reward"] is None else f"{e['reward']:g}"
        print(f"{e['id']:<{width}}  {e['source']:<16}  {e['calls']:>5}  {reward}")
    rewarded = sum(e["reward"] is not None for e in episodes)
    print(f"astuner: {len(episodes)} episodes, {rewarded} with a reward", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    from astuner.model.chat.rerender import check_episode, summary
    from astuner.records.trace_store import TraceStore

    store = TraceStore.read(Path(args.store))
    tokenizer = _tokenizer(args.model)
    checks = [check_episode(tokenizer, e["id"], store.calls(e["id"])) for e in store.episodes()]
    report = summary(checks)
    _say(report, args.json)
    return 0


def _import(args: argparse.Namespace) -> int:
    from astuner.errors import DataError
    from astuner.records.trace_store import TraceStore
    from astuner.traces.importer import import_calls, read_log
    from astuner.traces.studio import is_sqlite, read_studio

    log = Path(args.log)
    if not log.is_file():
        raise DataError(f"{log}: " + ("a folder, not a chat log or Studio database" if log.is_dir() else
                                      "not a file" if log.exists() else "no such file"))
    studio = args.format == "studio" or (args.format == "auto" and is_sqlite(log))
    # read first: a file that is no log, or holds no call, is said before any store is made
    if studio:
        read = read_studio(log)
        calls, skipped, reasoning, entries = read.calls, read.skipped, read.reasoning, read.spans
    else:
        (calls, skipped, entries), reasoning = read_log(log), 0
    if not calls:
        what = "model-call spans" if studio else "lines"
        raise DataError(f"{log}: no model call to import ({entries} {what}"
                        + (f"; the first skipped: {skipped[0]})" if skipped else ")"))
    tokenizer = _tokenizer(args.model)
    store = TraceStore.open_for_writing(Path(args.store))
    try:
        report = import_calls(calls, skipped, store, tokenizer, "imported:studio" if studio else "imported:openai",
                              entries, _context(args.model))
    finally:
        store.close()
    if reasoning:
        report.notes.append(f"{reasoning} replies' reasoning parts were left out (the chat message shape has no "
                            f"field for them)")
    out = report.as_dict()
    print(f"astuner: imported {out['calls']} calls in {out['episodes']} episodes ({out['rewards']} with a reward) "
          f"from {out['lines']} {'model-call spans' if studio else 'lines'} into {args.store}", file=sys.stderr)
    for note in out["notes"]:
        print(f"astuner: note: {note}", file=sys.stderr)
    for line in out["skipped"][:SHOWN]:
        print(f"astuner: skipped {line}", file=sys.stderr)
    if len(out["skipped"]) > SHOWN:
        print(f"astuner: ... and {len(out['skipped']) - SHOWN} more skipped (--json lists them)", file=sys.stderr)
    _say(out["check"], args.json, out)
    return 0


def _judge(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib

    from astuner.config import load_run_config
    from astuner.errors import DataError, Found
    from astuner.model.auxiliary import config_auxiliary_models
    from astuner.model.chat.tool_parser import ALIASES, resolve_reasoning
    from astuner.plugins import resolve_plugins
    from astuner.records.trace_store import TraceStore
    from astuner.rollout.manager import build_judge
    from astuner.traces.judging import judge_episodes

    if args.concurrency < 1:
        raise DataError(f"--concurrency must be at least 1, got {args.concurrency}")
    reader = TraceStore.read(Path(args.store))  # a missing or foreign file is said before the config is read
    overrides = list(args.overrides) + ([f"astuner.task_judge.judge_protocol={args.judge}"]
                                        if args.judge is not None else [])
    found = Found()
    composed, config = found.attempt(load_run_config, args.conf, overrides, found)
    plugins = resolve_plugins(config, found) if composed else None
    found.raise_all()
    if plugins.judge is None:
        raise DataError(f"{args.conf}: no judge (astuner.task_judge.judge_protocol); name one, or pass --judge")
    writer = TraceStore.open_for_writing(Path(args.store))  # refused while `astuner serve` writes it
    try:
        judge = build_judge(plugins.judge, config.astuner)
        auxiliary = config_auxiliary_models(config.astuner, config.extra_roots)
        rollout = config.astuner.rollout
        reply_format = (ALIASES.get(rollout.tool_call_parser, rollout.tool_call_parser),
                        resolve_reasoning(rollout.reasoning_parser))
        with contextlib.redirect_stdout(sys.stderr):  # what a judge prints stays out of the --json report
            report = asyncio.run(judge_episodes(judge, reader, writer, args.all, args.concurrency, auxiliary,
                                                reply_format)).as_dict()
    finally:
        writer.close()
    if args.json:
        print(json.dumps(report, indent=1))
    mean = "-" if report["mean_reward"] is None else f"{report['mean_reward']:.3f}"
    kept = f"; {report['kept']} kept their reward (--all judges them too)" if report["kept"] else ""
    failed = f"; {len(report['failed'])} failed" if report["failed"] else ""
    print(f"astuner: judged {report['judged']} of {report['episodes']} episodes (mean reward {mean}){kept}{failed}",
          file=sys.stderr)
    for line in report["failed"][:SHOWN]:
        print(f"astuner: not judged: {line}", file=sys.stderr)
    if len(report["failed"]) > SHOWN:
        print(f"astuner: ... and {len(report['failed']) - SHOWN} more (--json lists them)", file=sys.stderr)
    return 0


def _say(check: dict[str, Any], as_json: bool, whole: Any = None) -> None:
    if as_json:
        print(json.dumps(whole if whole is not None else check, indent=1))
    causes = ", ".join(f"{cause} {n}" for cause, n in sorted(check["causes"].items())) or "none"
    print(f"astuner: re-render check: {check['passed']} of {check['episodes']} episodes give the tokens recorded "
          f"(mismatched calls by cause: {causes})", file=sys.stderr)
    failed = check["failed"]
    if failed:
        more = f" and {len(failed) - SHOWN} more" if len(failed) > SHOWN else ""
        print(f"astuner: episodes a re-render would change: {', '.join(failed[:SHOWN])}{more}", file=sys.stderr)
