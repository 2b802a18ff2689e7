"""A config file that is not valid YAML, reported as `file:line:col: problem` before Hydra reads it.

Hydra parses conf/config.yaml and every option the command line chooses while it composes, and a
syntax error there (an unclosed bracket in an experiment file) came out as a 95-line traceback with
the file's name buried in it. The command line (harness/__main__.py) parses the files it is about to
compose first, the way Hydra will (OmegaConf's YAML loader), and prints the first error in the form
editors and grep jump to.
"""
from __future__ import annotations

from pathlib import Path

_CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def config_dirs(argv: list[str], conf_dir: Path) -> list[Path]:
    """The folders Hydra searches for this command line: any --config-dir, the project's conf/, then the
    file:// entries of a `hydra.searchpath=[...]` override (pkg:// ones are not folders)."""
    dirs, searched = [], []
    for i, a in enumerate(argv):
        if a in _CONFIG_DIR_FLAGS and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif a.startswith(tuple(f + "=" for f in _CONFIG_DIR_FLAGS)):
            dirs.append(Path(a.split("=", 1)[1]))
        elif a.lstrip("+").startswith("hydra.searchpath="):
            for entry in a.split("=", 1)[1].strip().strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    searched.append(Path(entry[len("file://"):]))
    return [*dirs, Path(conf_dir), *searched]


def shown(folder: Path, conf_dir: Path) -> str:
    """A config folder as an error names it: conf/ for the project's own, else the path as given."""
    try:
        same = Path(folder).resolve() == Path(conf_dir).resolve()
    except OSError:
        same = False
    return "conf" if same else str(folder).rstrip("/")


def chosen_files(argv: list[str], conf_dir: Path) -> list[Path]:
    """config.yaml and the file of every `group=option` on the command line (each of `a,b` in a sweep)."""
    dirs = config_dirs(argv, conf_dir)
    files = [d / "config.yaml" for d in dirs]
    for a in argv:
        key, eq, value = a.lstrip("+~").partition("=")
        if not eq or "." in key or not value:
            continue
        for option in value.strip("[]").split(","):
            for d in dirs:
                path = d / key / f"{option.strip()}.yaml"
                if (d / key).is_dir() and path.is_file():
                    files.append(path)
                    break
    return [f for f in files if f.is_file()]


def yaml_problem(path: Path) -> str | None:
    """`path:line:col: problem` when the file is not YAML OmegaConf can read, else None."""
    import yaml
    from omegaconf import OmegaConf

    try:
        OmegaConf.load(path)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = f" ({e.context} at line {e.context_mark.line + 1})" if e.context and e.context_mark else ""
        return f"{where}: {e.problem or e.context}{context}; fix the YAML there (a bracket, brace or quote left open?)"
    except yaml.YAMLError as e:
        return f"{path}: not valid YAML ({e}); fix the file"
    except Exception:  # noqa: BLE001 - anything else (e.g. a duplicate key) is Hydra's to report, with its own message
        return None
    return None


def first_yaml_problem(argv: list[str], conf_dir: Path) -> str | None:
    for path in chosen_files(argv, conf_dir):
        problem = yaml_problem(path)
        if problem:
            return problem
    return None
