"""``morl forum ARGV`` through the command's own parser and ``main`` (shared by the forum tests)."""

from __future__ import annotations

import argparse


def forum_cli(argv):
    from morl.runners.forum import command as forum

    parser = argparse.ArgumentParser()
    forum.add_arguments(parser)
    return forum.main(parser.parse_args(argv))
