"""Settings as commented YAML and as a reference table; secrets masked.

One walk over the settings classes serves ``configs/default.yaml`` (generated,
so it cannot drift from the code), ``kdsm config show`` and the configuration
reference in docs/operations.md. Comments come from each field's
``description`` (``Field(description=...)`` in the config classes).

>>> from streamer.config import Settings
>>> keys = {k.path: k for k in iter_keys(Settings)}
>>> keys["kafka.sasl_password"].secret, keys["kafka.sasl_password"].env
(True, 'KDSM_KAFKA__SASL_PASSWORD')
>>> mask_url("redis://:hunter2@redis:6379/0")
'redis://:***@redis:6379/0'
>>> "hunter2" in render_yaml(Settings(redis={"password": "hunter2"}))
False
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from streamer.lifecycle.control import MASK, mask_url


@dataclass(frozen=True)
class Key:
    """One leaf setting: dotted path, env var name, default, help text, whether it is a secret."""

    path: str
    env: str
    default: Any
    help: str
    secret: bool
    type: str


def _is_section(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_secret(annotation) -> bool:
    if annotation is SecretStr:
        return True
    return any(a is SecretStr for a in typing.get_args(annotation))


def _type_name(annotation) -> str:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    return getattr(annotation, "__name__", str(annotation)).replace("SecretStr", "secret")


def _default(field) -> Any:
    if field.default is not PydanticUndefined:
        return field.default
    return field.default_factory() if field.default_factory is not None else None


def iter_keys(cls: type[BaseModel], prefix: str = "") -> Iterator[Key]:
    """Every leaf key of a settings class, in declaration order (nested sections flattened)."""
    for name, field in cls.model_fields.items():
        path = f"{prefix}{name}"
        if _is_section(field.annotation):
            yield from iter_keys(field.annotation, path + ".")
            continue
        yield Key(path=path, env="KDSM_" + path.replace(".", "__").upper(), default=_default(field),
                  help=field.description or "", secret=_is_secret(field.annotation),
                  type=_type_name(field.annotation))


def _plain(value: Any, secret: bool, mask: bool) -> Any:
    if isinstance(value, SecretStr):
        return MASK if mask else value.get_secret_value()
    if secret and value is not None and mask:
        return MASK
    if isinstance(value, str) and mask:
        return mask_url(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):  # the feature spec
        return [v.model_dump(mode="json", exclude_defaults=True) for v in value]
    return value


def _scalar(value: Any) -> str:
    # flow style keeps lists and dicts on the key's line, like a hand-written config
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("\n...").strip()


def render_yaml(settings: BaseModel, *, mask: bool = True, comments: bool = True) -> str:
    """``settings`` as YAML (one section per top-level field), each key preceded by its help as a comment.

    The output loads back (``yaml.safe_load``) to the same values, secrets aside when masked.
    """
    lines: list[str] = []
    _render(settings, type(settings), "", 0, lines, mask, comments)
    return "\n".join(lines) + "\n"


def _render(obj: BaseModel, cls, prefix: str, depth: int, lines: list[str], mask: bool, comments: bool) -> None:
    pad = "  " * depth
    for name, field in cls.model_fields.items():
        path = f"{prefix}{name}"
        value = getattr(obj, name)
        if _is_section(field.annotation):
            if comments:
                doc = (field.annotation.__doc__ or "").strip().splitlines()
                if depth == 0:
                    lines.append("")
                if doc:
                    lines.append(f"{pad}# {doc[0]}")
            lines.append(f"{pad}{name}:")
            _render(value, field.annotation, path + ".", depth + 1, lines, mask, comments)
            continue
        help_ = field.description or ""
        if comments and help_:
            lines.append(f"{pad}# {help_}")
        lines.append(f"{pad}{name}: {_scalar(_plain(value, _is_secret(field.annotation), mask))}")


def reference_table(cls: type[BaseModel]) -> str:
    """Markdown table of every key: YAML path, env var, type, default, description."""
    rows = ["| key | env var | type | default | description |", "|---|---|---|---|---|"]
    for k in iter_keys(cls):
        default = _scalar(_plain(k.default, k.secret, mask=True))
        desc = k.help.replace("|", "\\|")
        typ = k.type.replace("|", "\\|")
        rows.append(f"| `{k.path}` | `{k.env}` | {typ} | `{default}` | {desc} |")
    return "\n".join(rows) + "\n"


DEFAULT_HEADER = """\
# kdsm-stream: every setting with its default (GENERATED, do not edit by hand).
# Regenerate: python -m streamer.ops.render default > configs/default.yaml
#
# Precedence, lowest first: these defaults < a YAML file (--config FILE)
#   < environment KDSM_<SECTION>__<KEY> (e.g. KDSM_KAFKA__BOOTSTRAP=kafka:9092)
#   < command-line flags. Unknown keys are errors (`kdsm config check FILE`).
# Secrets (kafka.sasl_password, redis.password) belong in the environment, not here.
# A config file only needs the keys it changes; see configs/demo.yaml.
"""


def default_yaml(settings_cls) -> str:
    """The text of ``configs/default.yaml``: header + every key at its default, commented."""
    return DEFAULT_HEADER + render_yaml(settings_cls.model_construct(), mask=False)


REF_BEGIN = "<!-- BEGIN CONFIG REFERENCE (generated: python -m streamer.ops.render docs) -->"
REF_END = "<!-- END CONFIG REFERENCE -->"


def replace_reference(markdown: str, table: str) -> str:
    """``markdown`` with the text between the reference markers replaced by ``table``.

    >>> replace_reference(f"a\\n{REF_BEGIN}\\nold\\n{REF_END}\\nb", "| new |\\n").splitlines()[2]
    '| new |'
    """
    head, sep, rest = markdown.partition(REF_BEGIN)
    _, sep2, tail = rest.partition(REF_END)
    if not sep or not sep2:
        raise ValueError("reference markers not found")
    return f"{head}{REF_BEGIN}\n{table}{REF_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    from streamer.config import Settings

    p = argparse.ArgumentParser(prog="python -m streamer.ops.render",
                                description="print configs/default.yaml or the Markdown configuration reference, "
                                            "or refresh the reference in docs/operations.md")
    p.add_argument("what", choices=["default", "reference", "docs"])
    p.add_argument("--docs", default="docs/operations.md", help="file whose reference section `docs` rewrites")
    a = p.parse_args(argv)
    if a.what == "docs":
        path = Path(a.docs)
        path.write_text(replace_reference(path.read_text(), reference_table(Settings)))
    else:
        print(default_yaml(Settings) if a.what == "default" else reference_table(Settings), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
