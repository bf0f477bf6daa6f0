"""``kdsm config show`` and ``kdsm config check``: the effective configuration, and validation of a file.

``show`` prints every key after defaults < YAML < env ``KDSM_*`` are applied,
as YAML, with secrets (SecretStr fields, passwords in URLs) masked. ``check``
validates one file and prints ``OK`` or one line naming every bad key (joined by "; "), exit status 2
on error (so CI and init containers can gate on it); it warns about each secret
the file holds, a password inside a URL included.

>>> import argparse
>>> from streamer.config import Settings
>>> parser = argparse.ArgumentParser(prog="kdsm")
>>> register(parser.add_subparsers(dest="command"), Settings)
>>> parser.parse_args(["config", "check", "configs/demo.yaml"]).file
'configs/demo.yaml'
"""

from __future__ import annotations

import argparse
import sys

import yaml

from offline_train.config import ConfigError, load_settings
from streamer.lifecycle.control import mask_url

from .render import iter_keys, render_yaml


def register(sub: argparse._SubParsersAction, settings_cls) -> None:
    p = sub.add_parser("config", help="show the effective configuration or check a config file",
                       description="Configuration: defaults < YAML file < env KDSM_<SECTION>__<KEY>. "
                                   "Every key is listed in configs/default.yaml.")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = csub.add_parser("show", help="print the effective configuration as YAML (secrets masked)")
    q.add_argument("--config", help="YAML config file (env KDSM_<SECTION>__<KEY> overrides it)")
    q.add_argument("--comments", action="store_true", help="print each key's description as a comment above it")
    q.add_argument("--section", help="print only this section, e.g. kafka")
    q.set_defaults(func=lambda a: _show(a, settings_cls))
    q = csub.add_parser("check", help="validate a config file: OK, or the readable errors and exit status 2")
    q.add_argument("file", help="YAML config file")
    q.set_defaults(func=lambda a: _check(a, settings_cls))


def _show(a, settings_cls) -> int:
    s = load_settings(settings_cls, a.config)
    if a.section:
        if a.section not in type(s).model_fields:
            raise ConfigError(f"unknown section {a.section!r}; sections: {', '.join(type(s).model_fields)}")
        # cut the one section out of the full (masked) rendering as text, so its comments stay
        text = cut_section(render_yaml(s, mask=True, comments=a.comments), a.section)
    else:
        text = render_yaml(s, mask=True, comments=a.comments).lstrip("\n")
    sys.stdout.write(text)
    return 0


def cut_section(text: str, section: str) -> str:
    """The top-level ``section`` (or top-level key) of a rendering (``render_yaml``), with its comments.

    It runs from the section's own comment line (if any) to the next line at column 0.

    >>> cut_section("\\n# A.\\na:\\n  # x help\\n  x: 1\\n\\n# B.\\nb:\\n  y: 2\\n", "a")
    '# A.\\na:\\n  # x help\\n  x: 1\\n'
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line == f"{section}:" or line.startswith(f"{section}: "))
    end = start + 1
    while end < len(lines) and (not lines[end] or lines[end][0] in " \t"):
        end += 1
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return "\n".join(lines[start:end]).rstrip("\n") + "\n"


def secrets_in_file(settings_cls, path) -> list[tuple[str, str]]:
    """(key, what) for each secret given a value in the YAML file itself (they belong in the environment): a secret
    key, or credentials inside a URL-valued one (``redis://:pw@host``, ``?password=``: what ``config show`` masks)."""
    try:
        data = yaml.safe_load(open(path).read()) or {}
    except (OSError, yaml.YAMLError):
        return []
    found = []
    for k in iter_keys(settings_cls):
        node = data
        for part in k.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if k.secret and node not in (None, ""):
            found.append((k.path, f"the secret {k.path}"))
        elif any(isinstance(v, str) and mask_url(v) != v for v in (node if isinstance(node, list) else [node])):
            found.append((k.path, f"credentials in the URL {k.path}"))
    return found


def _check(a, settings_cls) -> int:
    try:
        load_settings(settings_cls, a.file)
    except ConfigError as e:
        print(f"{a.file}: {e}", file=sys.stderr)
        return 2
    for path, what in secrets_in_file(settings_cls, a.file):
        env = "KDSM_" + path.replace(".", "__").upper()
        print(f"warning: {a.file} holds {what}; prefer env {env}", file=sys.stderr)
    print(f"OK: {a.file}")
    return 0
