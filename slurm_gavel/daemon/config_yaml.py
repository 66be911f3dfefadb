"""Decoding the config file: YAML through a SafeLoader that refuses a key given twice
(PyYAML silently keeps the last), every failure a ConfigError naming the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from slurm_gavel.daemon.config_types import ConfigError
from slurm_gavel.domain.field_checks import show


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects a key given twice (PyYAML silently keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool | None):
            # A list or mapping as a key (`[a, b]: 1`, `? {x: 1}`): no key of ours is one.
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: a {show(key).removeprefix('a ')} "
                "cannot be a key; keys are plain names such as 'policy'"
            )
        if key in seen:
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: key '{key}' is given twice; keep one"
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def read_yaml(text: str, p: Path) -> Any:
    """The decoded document of config file ``p`` (its text given)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from e
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply to read; this is not a config") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML{line}: {problem}") from e
