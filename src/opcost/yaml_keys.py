"""Keys written twice in one mapping of a YAML file: YAML keeps the last silently, so a config's first entry would be
dropped without a word (:func:`opcost.config.load` and the workflow refuse them)."""
from __future__ import annotations

import yaml


def duplicate_keys(text: str, where: str) -> list[str]:
    """One line per key that appears twice in one mapping of the YAML ``text`` (file ``where``): YAML keeps the
    last silently, so the first entry would be dropped without a word."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:  # a syntax error: reported by the loader itself
        return []
    out, stack = [], [(root, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else str(key)
                full = f"{path}.{name}" if path else name
                if name in seen:
                    out.append(f"config {where}: line {key.start_mark.line + 1}: key {full} also on line "
                               f"{seen[name] + 1}: the last one would silently replace the first; keep one")
                seen.setdefault(name, key.start_mark.line)
                stack.append((value, full))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node.value))
    return sorted(out)
