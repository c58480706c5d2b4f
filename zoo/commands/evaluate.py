"""Verbs of this family are registered here (work in progress: registers nothing yet)."""

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    return None
