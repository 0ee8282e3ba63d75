"""What a person reads from Markdown source the app wrote with `md_escape`: the escapes removed."""

import re

_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|$<>~])")


def shown(markdown: str) -> str:
    return _ESCAPE.sub(r"\1", markdown)
