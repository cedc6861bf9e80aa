"""The `astuner` command. `main(argv) -> int`; exit codes: 0 ok, 2 user error, 1 internal failure or a failed
run, 130 interrupted, 143 terminated (SIGTERM). Nothing heavy (torch, transformers, ray, vllm, verl, trinity) is imported here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from astuner.version import __version__
from astuner.cli_args import OneLineParser, run_command, say_error
from astuner.config.notes import shown

EXIT_OK, EXIT_INTERNAL, EXIT_USER, EXIT_INTERRUPTED = 0, 1, 2, 130

EPILOG = """\
overrides: trailing Hydra-style overrides, e.g.  astuner.rollout.num_repeat=8  +astuner.model.lora.rank=8  ~trinity.trainer
examples:
  astuner --conf tutorial/example_math_agent/math_agent.yaml --dry-run
  astuner view launcher_record/math_agent          # browse a run's curves, episodes and tokens
  astuner merge-lora launcher_record/my_run/checkpoints/global_step_100 --out my_model   # LoRA: base + adapter
  astuner chat launcher_record/my_run/checkpoints/global_step_100   # talk to the trained model
  astuner eval --conf my_agent.yaml --model my_base_model --model launcher_record/my_run/checkpoints/global_step_100
  astuner --conf my_agent.yaml --backbone=debug astuner.data.train_batch_size=8
  astuner --conf my_agent.yaml --backbone=trinity --with-ray
  astuner --conf my_agent.yaml 'astuner.rollout.agentscope_workflow=my_pkg.agent->MyWorkflow'
plug-in strings hold '->': quote the whole override, or the shell reads '>' as a redirect.
ctrl-c stops the run cleanly; a second ctrl-c stops it at once.
"""


def build_parser() -> argparse.ArgumentParser:
    """The training form's parser; its help opens with every command's synopsis and a line on each."""
    parser = OneLineParser(prog="astuner", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conf", required=True, metavar="PATH", help="the experiment YAML")
    parser.add_argument("--version", action="version", version=f"astuner {__version__}", help=argparse.SUPPRESS)
    from astuner.backbone import BACKBONES

    parser.add_argument("--backbone", choices=list(BACKBONES), default="debug",
                        help="debug: one machine, no Ray; verl / trinity: distributed training on Ray (default: debug)")
    parser.add_argument("--with-ray", action="store_true", help="start a local Ray head when none is reachable")
    parser.add_argument("--with-logview", action="store_true",
                        help="serve the trajectory viewer of this run while it trains (prints its URL)")
    parser.add_argument("--logview-port", type=int, default=0, metavar="N",
                        help="port of --with-logview's viewer on 127.0.0.1 (default: any free port)")
    parser.add_argument("--exp-dir", default="launcher_record", metavar="DIR",
                        help="parent folder of run records (default: launcher_record)")
    parser.add_argument("--resume", action="store_true", help="continue the run already in the run folder")
    parser.add_argument("--verbose", action="store_true",
                        help="show the libraries' own progress bars and warnings (transformers, datasets, hub) "
                             "and each AgentScope agent's printed messages")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the config, plug-ins, task rows, model folder and env service; print the merged "
                             "config; start nothing, write nothing")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra-style config overrides")
    commands = _commands()
    parser.usage = "\n".join(synopsis(parser, commands)).replace("\n", "\n" + " " * len("usage: "))
    width = max(len("astuner --conf PATH"), *(len(f"astuner {name}") for name in commands)) + 2
    parser.description = "\n".join(
        ["Train an AgentScope agent with reinforcement learning, and look at what it learned.", "", "commands:",
         f"  {'astuner --conf PATH':<{width}}{TRAIN}"]
        + [f"  {'astuner ' + name:<{width}}{build().description}" for name, (build, _) in commands.items()]
        + ["  'astuner COMMAND --help' shows a command's own options."])
    return parser


TRAIN = "Compose the experiment YAML with the overrides, check it, train (the options below)."
SYNOPSIS_WIDTH = 112  # `astuner --help`'s synopsis, as docs/configuration.md shows it


def synopsis(parser: argparse.ArgumentParser, commands: dict[str, Any]) -> list[str]:
    """The synopsis of the training form (`parser`) and of each subcommand: one usage each (without -h), wrapped
    at SYNOPSIS_WIDTH with its continuation lines indented. Made from the parsers, so it is their options."""
    lines: list[str] = []
    for one in [parser, *(build() for build, _ in commands.values())]:
        formatter = argparse.HelpFormatter(one.prog, width=10_000)
        formatter.add_usage(None, one._actions, one._mutually_exclusive_groups, prefix="")
        words = _groups(formatter.format_help().strip().replace(" [-h]", ""))
        line = ""
        for word in words:
            if line and len(line) + 1 + len(word) > SYNOPSIS_WIDTH:
                lines.append(line)
                line = " " * 8
            line += word if not line.strip() else " " + word
        lines.append(line)
    return lines


def _groups(usage: str) -> list[str]:
    """`usage` in its words, a bracketed group ('[--port N]', '[OVERRIDE ...]') kept whole."""
    words, depth, word = [], 0, ""
    for ch in usage:
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
        if ch == " " and depth == 0:
            words.append(word)
            word = ""
        else:
            word += ch
    return [w for w in words + [word] if w]


def _run(args: argparse.Namespace) -> int:
    from astuner.records.progress import quiet_libraries

    quiet_libraries(args.verbose)  # before transformers / datasets are imported: they read it then
    from astuner.model.openmp import prefer_passive_waits

    prefer_passive_waits()  # before torch is imported: its OpenMP runtime reads the wait policy then
    from astuner.backbone import get_backbone
    from astuner.config import load_run_config
    from astuner.errors import Found
    from astuner.plugins import resolve_plugins

    found = Found()  # every problem, from here to the run's own checks, is said together (one per line)
    if args.with_logview:
        from astuner.viewer.server import check_port

        found.attempt(check_port, args.logview_port, "--logview-port")
    composed, run_config = found.attempt(load_run_config, args.conf, args.overrides, found)
    if not composed:  # a config that cannot be composed: said with what was found before it (the port)
        found.raise_all()
    plugins = resolve_plugins(run_config, found)
    run_root = Path(args.exp_dir) / run_config.experiment_name
    from astuner.run import RunRequest, check, execute

    request = RunRequest(config=run_config, plugins=plugins, backbone=args.backbone, exp_dir=Path(args.exp_dir),
                         resume=args.resume, with_ray=args.with_ray, with_logview=args.with_logview,
                         logview_port=args.logview_port, found=found)
    if args.dry_run:  # the run's own checks, run folder included; offline
        backbone = get_backbone(args.backbone)
        _, notes = check(request, backbone, offline=True, report=False)
        text = found.attempt(backbone.dry_run, run_config, run_root.absolute())[1] if not found.bad_keys else ""
        found.raise_all()
        sys.stdout.write(text or "")
        for note in notes:
            print(f"astuner: {shown(note)}", file=sys.stderr)
        missing = _missing_backbone(backbone)
        judge = run_config.astuner.task_judge.judge_protocol or "none (the workflow returns rewards)"
        print(f"astuner: config OK (dry run, nothing started): backbone={args.backbone}, "
              f"workflow={run_config.astuner.rollout.agentscope_workflow}, judge={judge}, run folder={run_root}",
              file=sys.stderr)
        if missing:
            print(f"astuner: but not runnable in this environment: {missing}", file=sys.stderr)
        return EXIT_OK

    execute(request)
    return EXIT_OK


def _missing_backbone(backbone: Any) -> str:
    """What the real run would be refused for in this environment (the backbone's package not installed), or ''.
    A dry run still checks the config without it (the translation, everything astuner reads), and says so."""
    from astuner.errors import BackboneUnavailable

    try:
        backbone.check_available()
    except BackboneUnavailable as exc:
        return str(exc)
    return ""


def build_view_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="astuner view",
                           description="Serve a run folder's curves, episodes and tokens in the browser.")
    parser.add_argument("run", metavar="RUN", help="the run folder, e.g. launcher_record/<experiment_name>; an "
                                                   "astuner eval folder; or a trace store (astuner serve --store)")
    parser.add_argument("--port", type=int, default=8765, metavar="N", help="port (default 8765; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                        help="address to listen on (default 127.0.0.1; any other exposes the run: a warning says so)")
    return parser


def _view(argv: Sequence[str]) -> int:
    def view(args: argparse.Namespace) -> int:
        from astuner.viewer import serve_forever

        try:
            serve_forever(Path(args.run), args.host, args.port)
        except KeyboardInterrupt:  # the way a viewer is stopped
            pass
        return EXIT_OK

    return run_command(build_view_parser(), view, argv)


def build_merge_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="astuner merge-lora", description="Write a LoRA run's checkpoint as one model: base weights + adapter.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT",
                        help="a checkpoint (launcher_record/<name>/checkpoints/global_step_N) or its model/ folder")
    parser.add_argument("--out", required=True, metavar="DIR", help="a new folder for the merged model")
    parser.add_argument("--base", metavar="PATH", help="the base model (default: the one the adapter names)")
    return parser


def _merge_lora(argv: Sequence[str]) -> int:
    def merge(args: argparse.Namespace) -> int:
        from astuner.backbone.debug.lora import merge_checkpoint

        folder = Path(args.checkpoint)
        if (folder / "model").is_dir():
            folder = folder / "model"
        out = merge_checkpoint(folder, Path(args.out), args.base)
        print(f"astuner: merged model written to {out}", file=sys.stderr)
        return EXIT_OK

    return run_command(build_merge_parser(), merge, argv)


def _second_interrupt_stops_at_once() -> object:
    """Ctrl-C once: KeyboardInterrupt, the run winds down. Twice: one line, exit 130 now. SIGTERM winds the
    run down too (exit 143); see astuner/interrupts.py. Returns the previous handlers."""
    import signal

    from astuner.interrupts import on_sigterm, stop_at_once

    def handler(signum: int, frame: object) -> None:
        if getattr(handler, "seen", False):
            stop_at_once()
        handler.seen = True  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    on_sigterm.seen = False  # type: ignore[attr-defined]
    try:
        return signal.signal(signal.SIGINT, handler), signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (main() called from a library thread): leave Python's default
        return None


def _commands() -> dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[[Sequence[str]], int]]]:
    """`astuner NAME ...`: each subcommand's parser (its description is its line in `astuner --help`) and main."""
    from astuner.chat import build_parser as build_chat_parser, main as chat
    from astuner.evaluate.cli import build_parser as build_eval_parser, main as evaluate
    from astuner.serve.cli import build_parser as build_serve_parser, main as serve
    from astuner.traces.cli import build_parser as build_traces_parser, main as traces

    return {"view": (build_view_parser, _view), "chat": (build_chat_parser, chat),
            "eval": (build_eval_parser, evaluate), "serve": (build_serve_parser, serve),
            "traces": (build_traces_parser, traces),
            "merge-lora": (build_merge_parser, _merge_lora)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    if argv[:1] and argv[0] in commands:
        return commands[argv[0]][1](argv[1:])
    if argv[:1] == ["--version"]:
        print(f"astuner {__version__}")
        return 0
    if argv[:1] and not argv[0].startswith("-") and "=" not in argv[0]:  # a word where a command goes
        import difflib

        close = difflib.get_close_matches(argv[0], list(commands), n=1, cutoff=0.6)
        hint = (f"did you mean 'astuner --conf {argv[0]}'? " if argv[0].endswith((".yaml", ".yml")) else
                f"did you mean 'astuner {close[0]}'? " if close else "")
        say_error(f"'{argv[0]}' is not a command; {hint}the commands: astuner --conf PATH (train), "
                  f"{', '.join(commands)} ('astuner --help' says what each does)")
        return 2
    parser = build_parser()
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as exc:  # argparse printed the usage error (or --help)
        return int(exc.code or 0)

    from astuner.errors import AstunerError

    previous = _second_interrupt_stops_at_once()
    try:
        return _run(args)
    except AstunerError as exc:
        lines = getattr(exc, "lines", [str(exc)])  # several problems found together: a count, then one line each
        if len(lines) > 1:
            say_error(f"{len(lines)} problems:")
        for problem in lines:
            say_error(problem)
        return exc.exit_code
    except KeyboardInterrupt:
        say_error("interrupted")
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        import signal

        from astuner.interrupts import EXIT_TERMINATED, Terminated

        # ours, or Ray's: its ray.init (verl's, Trinity's) installs a SIGTERM handler raising SystemExit(15)
        if not isinstance(exc, Terminated) and exc.code != signal.SIGTERM:
            raise
        say_error("terminated (SIGTERM); the run wound down")
        return EXIT_TERMINATED
    except Exception:
        import traceback

        from loguru import logger

        logger.error(f"internal failure:\n{traceback.format_exc()}")
        say_error("internal failure (traceback above); please report it with the config you ran")
        return EXIT_INTERNAL
    finally:
        if previous is not None:
            import signal

            for signum, handler in zip((signal.SIGINT, signal.SIGTERM), previous):
                if handler is not None:  # None: a handler set outside Python, which cannot be put back
                    signal.signal(signum, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
