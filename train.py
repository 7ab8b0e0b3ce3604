"""Train a placement policy (not implemented yet).

Training arrives with the environment and encoder issues. Until then this
script says so and exits with status 2; compare the classical placers with
``python -m baselines --graph default --devices 3``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    raise NotImplementedError("train.py: learned placement is not implemented yet; "
                              "run 'python -m baselines --graph default --devices 3' to compare the classical placers")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NotImplementedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
