"""Exit 1 with one line when this Python is outside pyproject.toml's requires-python (`make setup` runs it first).

Standard library only, no f-string features past 3.6: it must run on the Python it refuses.
"""

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def version(text):
    return tuple(int(part) for part in text.split("."))


def main():
    spec = re.search(r'^requires-python\s*=\s*"([^"]+)"', PYPROJECT.read_text(), re.MULTILINE).group(1)
    here = sys.version_info[:3]
    for clause in spec.split(","):
        operator, bound = re.fullmatch(r"\s*(>=|<)\s*([0-9.]+)\s*", clause).groups()
        if (operator == ">=" and here < version(bound)) or (operator == "<" and here >= version(bound)):
            sys.stderr.write("error: {} is Python {}; qgate needs Python {} (pyproject.toml): run "
                             "`make setup PYTHON=python3.11` (or another supported one)\n".format(
                                 sys.executable, ".".join(map(str, here)), spec))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
