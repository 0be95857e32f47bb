"""The ``tensorcode`` command (also ``python -m tensorcode``): train, evaluate, inspect and validate offline.

    tensorcode train TOOL_DIR EXPERIENCE... --output DIR [--epochs N] [--interval N] [--lr X] ...
    tensorcode evaluate TOOL_DIR EXPERIENCE... [--json]
    tensorcode inspect PATH... [--json]
    tensorcode validate PATH... [--tool TOOL_DIR]

``train`` checkpoints into ``DIR/checkpoint`` and resumes from it when the same command runs again; Ctrl-C
stops at the next step after writing a checkpoint. Errors are one line on stderr with a non-zero exit status;
``--debug`` shows the traceback. Only ``train``, ``evaluate`` and ``validate`` import torch, when they start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from pathlib import Path

PROG = "tensorcode"
EXIT_ERROR, EXIT_USAGE, EXIT_STOPPED = 1, 2, 130
_EXTRA = ("torch", "safetensors", "numpy")  # what the tools extra installs


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.debug = getattr(args, "debug", False) or args.debug_first
    if args.command is None:
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as exc:  # noqa: BLE001 - the command line reports every failure as one line
        if args.debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, ModuleNotFoundError) and exc.name in _EXTRA:
            message = f"{args.command} needs the tools extra ({exc.name} is missing): pip install 'tensorcode[tools]'"
        elif not isinstance(exc, (ValueError, OSError)):
            message = f"{type(exc).__name__}: {message}"
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_ERROR


# -- commands ----------------------------------------------------------------------------------------------------
def _train(args) -> int:
    from . import tools, training

    tool_dir, output = Path(args.tool), Path(args.output)
    if output.exists() and tool_dir.exists() and output.resolve() == tool_dir.resolve():
        raise ValueError("--output: give a new directory; the tool directory is where training starts from")
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output: {output} exists and is not a directory")
    experiences = _experience_files(args.experiences)
    checkpoint = Path(args.checkpoint_dir) if args.checkpoint_dir else output / "checkpoint"
    _apart(args.experiences, {"--output": output, "--checkpoint-dir": checkpoint})
    bar = _ProgressBar(sys.stderr, quiet=args.quiet)
    # From here on Ctrl-C asks to stop: one arriving while torch is imported must not interrupt the import.
    with _StopOnSignal() as stop:
        tool = tools.load_pretrained(tool_dir)
        if stop.requested:
            print(f"{PROG}: stopped before the first step; nothing was written", file=sys.stderr)
            return EXIT_STOPPED
        result = training.run(
            tool,
            experiences,
            epochs=args.epochs,
            checkpoint_dir=checkpoint,
            interval=args.interval,
            seed=args.seed,
            shuffle=not args.no_shuffle,
            optimizer=args.optimizer,
            lr=args.lr,
            device=args.device,
            callback=lambda report: bar.update(report) or stop.requested,
        )
    bar.close()
    if not result.completed:
        print(
            f"{PROG}: stopped at step {result.steps} of {result.total}; the checkpoint is in {checkpoint}; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    tool.save_pretrained(output)
    losses = result.losses
    change = f"loss {losses[0]:.4f} -> {losses[-1]:.4f}" if losses else "no steps"
    resumed = f", resumed at step {result.resumed_from}" if result.resumed_from else ""
    print(f"trained {tool.NAME}: {result.steps} steps{resumed}, {change}; wrote {output}")
    return 0


def _evaluate(args) -> int:
    from . import tools, training

    tool = tools.load_pretrained(Path(args.tool), device=_device(args.device))
    report = training.evaluate(tool, _experience_files(args.experiences))
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(
            f"{report['metric']} {report['value']:.4f} on {report['examples']} examples "
            f"(mean loss {report['loss']:.4f})"
        )
    return 0


def _inspect(args) -> int:
    from . import _inspect as inspect

    summaries = [inspect.summarize(p) for p in _files_to_read(args.paths)]
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2, allow_nan=False))
    else:
        sys.stdout.write("\n".join(inspect.render(s) for s in summaries))
    return 0


def _validate(args) -> int:
    from . import _validate as validate

    for path in _files_to_read(args.paths):
        print(f"ok: {validate.validate(path, tool_dir=None if args.tool is None else Path(args.tool))}")
    return 0


# -- helpers -------------------------------------------------------------------------------------------------------
def _experience_files(arguments: list[str]) -> list[Path]:
    """Experience files in the order given. A directory stands for the ``*.json`` files in it, sorted by name; an
    export's directory (a ``manifest.json`` listing its ``files``) for exactly the files its manifest lists."""
    paths = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = _listed(path) if (path / EXPORT_MANIFEST).is_file() else sorted(
                p for p in path.glob("*.json") if p.is_file())
            if not found:
                raise ValueError(f"{path}: the directory holds no experience files (*.json)")
            paths += found
        elif path.exists():  # a pipe or a device too: the loader refuses it, saying what it is
            paths.append(path)
        else:
            raise ValueError(f"{path}: no such experience file or directory")
    return paths


def _files_to_read(arguments: list[str]) -> list[Path]:
    """``inspect`` and ``validate`` take what ``train`` takes: a checkpoint or tool directory is itself, any
    other directory stands for its experience files, as in ``_experience_files``."""
    paths = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir() and not (path / "training.json").is_file() and not (path / "tool.json").is_file():
            paths += _experience_files([argument])
        else:
            paths.append(path)
    return paths


def _apart(experiences: list[str], written: dict[str, Path]) -> None:
    """Training must not write into a directory it reads experiences from: the second run of the same command
    would read the trained tool's ``tool.json`` (or the checkpoint's ``training.json``) as an experience."""
    read = {Path(p).resolve() for p in experiences if Path(p).is_dir()}
    for option, directory in written.items():
        if directory.resolve() in read:
            raise ValueError(f"{option}: {directory} is a directory of experiences this run reads; write to "
                             "another directory")


EXPORT_MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 2**20  # an export of 100,000 records a minibatch each lists them in some 10 MiB


def _listed(directory: Path) -> list[Path]:
    """The experience files an export's manifest lists, in its order; each must be a file of that directory."""
    where = directory / EXPORT_MANIFEST
    try:
        if where.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"it is over {MAX_MANIFEST_BYTES // 2**20} MiB")
        names = [entry["name"] for entry in json.loads(where.read_bytes())["files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: not an export's manifest (a JSON object whose \"files\" lists "
                         f"{{\"name\": ...}} entries): {exc}") from None
    paths = []
    for name in names:
        if not isinstance(name, str) or not name or Path(name).name != name or name.startswith("."):
            raise ValueError(f"{where}: {name!r} is not the name of a file beside the manifest")
        if not (directory / name).is_file():
            raise ValueError(f"{where}: lists {name}, which is missing (an export's files travel together)")
        paths.append(directory / name)
    return paths


def _device(name: str) -> str:
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: CUDA is not available here; use --device cpu or auto")
    return name


class _StopOnSignal:
    """Ctrl-C (or SIGTERM) asks the run to stop after its current step; a second Ctrl-C interrupts at once."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        self._previous = {}
        for number in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, number, frame):
        if self.requested and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n{PROG}: stopping after this step (Ctrl-C again to interrupt now)", file=sys.stderr)

    def __exit__(self, *exc):
        for number, handler in self._previous.items():
            signal.signal(number, handler)


class _ProgressBar:
    """A progress bar on a terminal; elsewhere (logs, pipes) a line at the first step, each checkpoint and the end."""

    WIDTH = 24

    def __init__(self, stream, *, quiet: bool):
        self.stream, self.quiet = stream, quiet
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._drawn = 0.0
        self._open = False

    def update(self, report) -> None:
        if self.quiet:
            return
        line = (
            f"step {report.step}/{report.total} epoch {report.epoch}/{report.epochs} loss {report.loss:.4f}"
            + (f" eta {_duration(report.eta_seconds)}" if report.eta_seconds is not None else "")
        )
        if self.tty:
            now = time.monotonic()
            if now - self._drawn < 0.1 and report.step < report.total:
                return
            self._drawn = now
            filled = self.WIDTH * report.step // max(report.total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {line}\033[K")
            self._open = True
        elif report.step == report.resumed_from + 1 or report.checkpointed or report.step == report.total:
            self.stream.write(line + (" (checkpoint)" if report.checkpointed else "") + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


# -- argument parsing ------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser = _Parser(prog=PROG, description="Train, evaluate, inspect and validate tensorcode tools and their files.")
    # Its own destination: a subcommand's default would overwrite a shared one.
    parser.add_argument("--debug", dest="debug_first", action="store_true", help="show the traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    train = commands.add_parser(
        "train",
        parents=[common],
        help="train a tool on experience files (resumes when run again)",
        description="Train the tool saved in TOOL_DIR on experience files and write the trained tool to --output. "
        "Checkpoints go to OUTPUT/checkpoint; running the same command again resumes from the last one.",
    )
    train.add_argument("tool", metavar="TOOL_DIR", help="a tool directory (tool.json, model.safetensors)")
    train.add_argument("experiences", metavar="EXPERIENCE", nargs="+",
                       help="experience files, or directories of *.json experience files")
    train.add_argument("-o", "--output", required=True, metavar="DIR", help="where the trained tool is written")
    train.add_argument("--epochs", type=int, default=1, help="passes over the experiences (default 1)")
    train.add_argument("--interval", type=int, default=100, help="steps between checkpoints (default 100)")
    train.add_argument("--lr", type=float, default=None, help="learning rate (default 0.001)")
    train.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd", help="default sgd")
    train.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto")
    train.add_argument("--seed", type=int, default=0, help="orders the experiences of each epoch (default 0)")
    train.add_argument("--no-shuffle", action="store_true", help="visit the experiences in the order given")
    train.add_argument("--checkpoint-dir", metavar="DIR", help="default OUTPUT/checkpoint")
    train.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser(
        "evaluate",
        parents=[common],
        help="score a tool on held-out experience files",
        description="Report the tool's natural metric (top1, accuracy, recall@1, mse or exact_match) and mean "
        "loss on experience files, changing nothing.",
    )
    evaluate.add_argument("tool", metavar="TOOL_DIR")
    evaluate.add_argument("experiences", metavar="EXPERIENCE", nargs="+")
    evaluate.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu", help="default cpu")
    evaluate.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluate.set_defaults(handler=_evaluate)

    inspect = commands.add_parser(
        "inspect",
        parents=[common],
        help="summarize an experience file, checkpoint directory or tool directory",
        description="Print what a file holds: calls, supervisions with their sources, tensors, fingerprints. "
        "Reads headers only; loads no model.",
    )
    inspect.add_argument("paths", metavar="PATH", nargs="+")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(handler=_inspect)

    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="check experience files, checkpoints and tool directories (exit status 0 if all are valid)",
        description="Load each PATH as strictly as training would, against the tool it names (or --tool), and "
        "print why the first invalid one is invalid.",
    )
    validate.add_argument("paths", metavar="PATH", nargs="+")
    validate.add_argument("--tool", metavar="TOOL_DIR", help="check compatibility with this tool directory")
    validate.set_defaults(handler=_validate)
    return parser
