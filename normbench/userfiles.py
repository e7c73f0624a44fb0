"""Files a user receives are data: how normbench reads what it did not write, and names what it writes.

    raw = load_yaml(path, "--claims")          # a claims or study file: no aliases, no duplicate keys
    name = safe_name(f"{study}_{data}")        # a name taken from a run, fit to be one file name
    png = inside(out, out / f"{name}.png")     # ... and a path checked to stay in the output folder

docs/reliability.md lists what normbench treats as code and what as data.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from normbench.errors import UserError

MAX_YAML_BYTES = 1 << 20  # a claims or study file is a page of text; more is not one
MAX_VALUES = 100_000  # values in a claims or study file, aliases written out: far more than any page holds
MAX_COUNT = 10_000  # any count a file asks for (looks' pairs, a sweep's jobs): beyond it, a typo or a bomb


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """yaml.SafeLoader without duplicate keys (YAML keeps the second silently)."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged, not a key of its own
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise yaml.MarkedYAMLError(None, None, f"the key {key!r} twice: keep one",
                                                   key_node.start_mark)
                    seen.add(key)
                except TypeError:  # an unhashable key: yaml's own error says it
                    break
            return super().construct_mapping(node, deep)

    return Loader


def load_yaml(path: Path, what: str) -> Any:
    """The YAML file at `path` (`what` names it in errors: "--claims", "study file"), or one UserError:
    missing, too large, not text, not YAML, an alias, a duplicate key, nested beyond reason."""
    import yaml

    path = Path(path)
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise UserError(f"{what} {path}: {path.stat().st_size:,} bytes, more than a YAML file of claims or "
                            f"sweeps holds ({MAX_YAML_BYTES:,})", "give the YAML file itself")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path}: not a text file (not UTF-8)", "give a YAML file") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path}: a folder, not a file", "give a YAML file") from None
    except OSError as e:
        raise UserError(f"{what} {path}: cannot read it ({e.strerror or e})", "give a readable YAML file") from None
    try:
        raw = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as e:
        raise UserError(f"{what} {path}: not valid YAML ({' '.join(str(e).split())[:300]})", "fix the file") from None
    except RecursionError:
        raise UserError(f"{what} {path}: nested too deeply to be claims or sweeps", "fix the file") from None
    if _expanded_beyond(raw, MAX_VALUES):  # aliases (*name) share a value; written out, it may be huge
        raise UserError(f"{what} {path}: its aliases (*name) expand to more than {MAX_VALUES:,} values",
                        "write the values out where they are used")
    return raw


def _expanded_beyond(raw: Any, limit: int) -> bool:
    """Does `raw`, every alias written out, hold more than `limit` values (the billion-laughs bomb)?"""
    stack, seen = [raw], 0
    while stack:
        seen += 1
        if seen > limit:
            return True
        node = stack.pop()
        if isinstance(node, dict):
            stack += [*node.keys(), *node.values()]
        elif isinstance(node, list):
            stack += node
    return False


def count(value: Any, where: str, what: str, limit: int = MAX_COUNT) -> int:
    """`value` as a count between 1 and `limit` (a look's pairs, a seed count), or one UserError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise UserError(f"{where}: {what}={value!r} is not a whole number from 1 to {limit:,}",
                        f"give {what} as a count, e.g. 3")
    return value


_UNSAFE = re.compile(r"[^A-Za-z0-9=._,+-]")


def safe_name(text: str, limit: int = 150) -> str:
    """`text` as one file name: each character outside [A-Za-z0-9=._,+-] becomes '_' (so no '/', no '\\'),
    no leading dot (so neither '..' nor a hidden file), at most `limit` characters (a longer one ends in a
    hash of the whole, so two names stay two)."""
    import hashlib

    name = _UNSAFE.sub("_", str(text)).lstrip(".") or "_"
    if len(name) > limit:
        name = f"{name[:limit - 9]}-{hashlib.sha256(str(text).encode()).hexdigest()[:8]}"
    return name


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal(text: str) -> str:
    """`text` from a run, as rich prints it: its markup ("[/]") as text, its control characters (a
    terminal's escape sequences) dropped."""
    from rich.markup import escape

    return escape(_CONTROL.sub("", str(text)))


def inside(folder: Path, path: Path) -> Path:
    """`path`, checked to resolve inside `folder` (symlinks followed): a UserError where a name taken from
    data would lead a writer out of its output folder."""
    if not Path(path).resolve().is_relative_to(Path(folder).resolve()):
        raise UserError(f"refusing to write {path}: it is outside {folder}",
                        "the runs name a study or dataset that is a path; it is data, never a place to write")
    return Path(path)


def environmental(e: BaseException) -> UserError | None:
    """The one line for an OSError of the machine, not of normbench (a full disk, a read-only or forbidden
    folder, a file where a folder is needed), or None for any other error."""
    import errno

    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
           errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
           errno.EPERM: "permission denied", errno.ENOTDIR: "a file stands where a folder is needed",
           errno.EEXIST: "a file stands where a folder is needed",
           errno.EISDIR: "a folder stands where a file is needed"}
    if not isinstance(e, OSError) or e.errno not in why:
        return None
    return UserError(f"cannot write {e.filename or 'a file'} ({why[e.errno]})",
                     "free space, or point the output at a folder you can write; what was written before is kept")
